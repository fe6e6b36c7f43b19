-- Issue 10: a process that an operator's cancel or discard emptied ends
-- 'cancelled' (not 'succeeded'), and operator actions leave Logs rows with the
-- outcomes 'cancelled', 'discarded' and 'retried' (worker_id: who, user@host).
-- A schedule tick whose run the database refused is recorded 'failed' (issue 10,
-- item 13) and the schedule moves on instead of holding back every later one.
-- stageq.open_stage sets a process's state afresh whenever it has tasks, so a
-- cancelled process that gets new tasks becomes active again by itself.
ALTER TABLE stageq.processes DROP CONSTRAINT IF EXISTS processes_state_check;
ALTER TABLE stageq.processes ADD CONSTRAINT processes_state_check
    CHECK (state IN ('active', 'succeeded', 'failed', 'cancelled'));

ALTER TABLE stageq.logs DROP CONSTRAINT IF EXISTS logs_outcome_check;
ALTER TABLE stageq.logs ADD CONSTRAINT logs_outcome_check
    CHECK (outcome IN ('running', 'succeeded', 'failed', 'abandoned', 'released',
                       'cancelled', 'discarded', 'retried')) NOT VALID;
-- Every existing row already satisfies the wider check: validating it scans the
-- table without blocking writers (SHARE UPDATE EXCLUSIVE).
ALTER TABLE stageq.logs VALIDATE CONSTRAINT logs_outcome_check;

ALTER TABLE stageq.schedule_runs DROP CONSTRAINT IF EXISTS schedule_runs_outcome_check;
ALTER TABLE stageq.schedule_runs ADD CONSTRAINT schedule_runs_outcome_check
    CHECK (outcome IN ('enqueued', 'caught-up', 'missed', 'skipped', 'manual', 'failed'));

-- Retention (issue 10, item 16): every worker prunes old Logs, Workers and
-- finished Processes rows in small batches; the latest pass is recorded here,
-- one row, for `queuectl status`.
CREATE TABLE stageq.prune_status (
    id                  int         PRIMARY KEY CHECK (id = 1),
    worker_id           text        NOT NULL,
    ran_at              timestamptz NOT NULL DEFAULT now(),
    logs_deleted        bigint      NOT NULL DEFAULT 0,
    workers_deleted     bigint      NOT NULL DEFAULT 0,
    processes_deleted   bigint      NOT NULL DEFAULT 0,
    retain_logs_s       bigint      NOT NULL DEFAULT 0,
    retain_workers_s    bigint      NOT NULL DEFAULT 0,
    retain_processes_s  bigint      NOT NULL DEFAULT 0
);
-- The process pruner looks for finished processes by age.
CREATE INDEX processes_finished ON stageq.processes (finished_at) WHERE finished_at IS NOT NULL;

-- stageq.validate_tasks (issue 10, item 6): stageq.submit (migration 000002)
-- calls it before writing anything, so SQL callers are refused exactly what
-- the CLI refuses (stages.Plan.Validate): unknown or misspelled fields ("atomc"),
-- wrong JSON types, fractions and numbers beyond 32 bits, negative orders,
-- empty or blank bodies, bad limit keys, unparseable run_at. It raises 22023
-- (invalid_parameter_value) naming the first bad task (1-based) and field.
-- Set-based: one pass over the array, no per-task statement.
CREATE OR REPLACE FUNCTION stageq.valid_timestamptz(p text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    PERFORM p::timestamptz;
    RETURN true;
EXCEPTION WHEN others THEN
    RETURN false;
END $$;

CREATE OR REPLACE FUNCTION stageq.valid_whole(p jsonb, p_min numeric, p_max numeric) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_typeof(p) = 'number' AND p::text::numeric = trunc(p::text::numeric)
       AND p::text::numeric BETWEEN p_min AND p_max
$$;

CREATE OR REPLACE FUNCTION stageq.validate_tasks(p_process text, p_tasks jsonb) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_bad record;
BEGIN
    IF p_process IS NULL OR p_process ~ '^\s*$' THEN
        RAISE EXCEPTION 'stageq: process: name must not be empty' USING ERRCODE = '22023';
    END IF;
    IF length(p_process) > 200 THEN
        RAISE EXCEPTION 'stageq: process: name is longer than 200 characters' USING ERRCODE = '22023';
    END IF;
    IF p_tasks IS NULL OR jsonb_typeof(p_tasks) <> 'array' OR jsonb_array_length(p_tasks) = 0 THEN
        RAISE EXCEPTION 'stageq: p_tasks must be a JSON array of at least one task object' USING ERRCODE = '22023';
    END IF;
    SELECT x.ord, p.problem INTO v_bad
      FROM jsonb_array_elements(p_tasks) WITH ORDINALITY AS x(t, ord)
      CROSS JOIN LATERAL (SELECT CASE
        WHEN jsonb_typeof(x.t) <> 'object' THEN 'must be a JSON object'
        WHEN EXISTS (SELECT 1 FROM jsonb_object_keys(x.t) k
                      WHERE k NOT IN ('execution_order', 'body', 'kind', 'max_attempts', 'priority',
                                      'atomic', 'run_at', 'delay_ms', 'limit_key'))
            THEN format('unknown field %s (known: execution_order, body, kind, max_attempts, priority, atomic, run_at, delay_ms, limit_key)',
                        (SELECT string_agg(quote_ident(k), ', ') FROM jsonb_object_keys(x.t) k
                          WHERE k NOT IN ('execution_order', 'body', 'kind', 'max_attempts', 'priority',
                                          'atomic', 'run_at', 'delay_ms', 'limit_key')))
        WHEN coalesce(jsonb_typeof(x.t -> 'execution_order'), 'null') = 'null' THEN 'execution_order is required'
        WHEN NOT stageq.valid_whole(x.t -> 'execution_order', 0, 2147483647)
            THEN format('execution_order must be a whole number from 0 to 2147483647, got %s', x.t -> 'execution_order')
        WHEN jsonb_typeof(x.t -> 'body') IS DISTINCT FROM 'string' THEN 'body must be a string'
        WHEN x.t ->> 'body' ~ '^\s*$' THEN 'body must not be empty'
        WHEN coalesce(jsonb_typeof(x.t -> 'kind'), 'null') NOT IN ('null', 'string') THEN 'kind must be a string'
        WHEN x.t ->> 'kind' = '' THEN 'kind must not be empty'
        WHEN length(x.t ->> 'kind') > 200 THEN 'kind is longer than 200 characters'
        WHEN coalesce(jsonb_typeof(x.t -> 'max_attempts'), 'null') <> 'null'
             AND NOT stageq.valid_whole(x.t -> 'max_attempts', 1, 2147483647)
            THEN format('max_attempts must be a whole number from 1 to 2147483647, got %s', x.t -> 'max_attempts')
        WHEN coalesce(jsonb_typeof(x.t -> 'priority'), 'null') <> 'null'
             AND NOT stageq.valid_whole(x.t -> 'priority', -2147483648, 2147483647)
            THEN format('priority must be a whole number that fits in 32 bits, got %s', x.t -> 'priority')
        WHEN coalesce(jsonb_typeof(x.t -> 'atomic'), 'null') NOT IN ('null', 'boolean') THEN 'atomic must be true or false'
        WHEN coalesce(jsonb_typeof(x.t -> 'delay_ms'), 'null') <> 'null'
             AND NOT stageq.valid_whole(x.t -> 'delay_ms', 0, 9223372036854775807)
            THEN format('delay_ms must be a whole number >= 0, got %s', x.t -> 'delay_ms')
        WHEN coalesce(jsonb_typeof(x.t -> 'run_at'), 'null') NOT IN ('null', 'string') THEN 'run_at must be a timestamp string'
        WHEN jsonb_typeof(x.t -> 'run_at') = 'string' AND NOT stageq.valid_timestamptz(x.t ->> 'run_at')
            THEN format('run_at %s is not a timestamp', x.t -> 'run_at')
        WHEN coalesce(jsonb_typeof(x.t -> 'limit_key'), 'null') NOT IN ('null', 'string') THEN 'limit_key must be a string'
        WHEN x.t ->> 'limit_key' ~ '^\s*$' THEN 'limit_key must not be empty'
        WHEN length(x.t ->> 'limit_key') > 200 THEN 'limit_key is longer than 200 characters'
        WHEN x.t ->> 'limit_key' LIKE 'kind:%' OR x.t ->> 'limit_key' LIKE 'process:%'
            THEN format('limit_key %s: the prefixes "kind:" and "process:" are reserved for kind and process limits', x.t -> 'limit_key')
        END AS problem) p
     WHERE p.problem IS NOT NULL
     ORDER BY x.ord
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'stageq: task %: %', v_bad.ord, v_bad.problem USING ERRCODE = '22023';
    END IF;
END $$;
