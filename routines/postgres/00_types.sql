-- The row a claim returns: one task, with what its worker needs to run it.
CREATE TYPE stageq_routines.claimed AS (
    id bigint,
    process_id bigint,
    process_name text,
    execution_order integer,
    kind text,
    body text,
    attempt integer,
    max_attempts integer,
    atomic boolean,
    abandons integer,
    schedule_name text,
    scheduled_for timestamp with time zone
);
