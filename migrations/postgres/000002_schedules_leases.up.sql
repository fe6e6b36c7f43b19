-- Recurring schedules and exclusive leases (issue 5).
--
-- A schedule is a named template (a stages.Plan as JSON) with a cron expression or
-- an interval. next_run is the next tick, always compared with the database's clock:
-- a worker locks a due row (FOR UPDATE SKIP LOCKED), enqueues the tick through
-- stageq.submit and advances next_run in the same transaction, so each tick is
-- enqueued once however many workers race. The ticks are computed by the worker
-- (cron needs a real parser) from next_run and the database's now, never from the
-- worker's own clock.

CREATE TABLE stageq.schedules (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name           text        NOT NULL UNIQUE CHECK (name <> '' AND length(name) <= 200),
    -- Exactly one of cron and interval_ms says when the ticks are.
    cron           text        CHECK (cron <> '' AND length(cron) <= 200),
    interval_ms    bigint      CHECK (interval_ms > 0),
    plan           text        NOT NULL,
    -- skip: ticks missed by more than grace_ms are dropped; once: one catch-up run.
    missed         text        NOT NULL DEFAULT 'skip' CHECK (missed IN ('skip', 'once')),
    grace_ms       bigint      NOT NULL DEFAULT 60000 CHECK (grace_ms >= 0),
    -- singleton: a tick is skipped while a task of an earlier run is unfinished.
    singleton      boolean     NOT NULL DEFAULT false,
    paused         boolean     NOT NULL DEFAULT false,
    next_run       timestamptz NOT NULL,
    last_run       timestamptz,
    last_outcome   text,
    last_worker_id text,
    last_fired_at  timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CHECK ((cron IS NULL) <> (interval_ms IS NULL))
);

-- The scheduler's question "what is due?" is a seek on this index.
CREATE INDEX schedules_due ON stageq.schedules (next_run) WHERE NOT paused;

-- One row per tick handled: the audit of who enqueued (or skipped) what, and a
-- second guarantee of once per tick (the primary key).
CREATE TABLE stageq.schedule_runs (
    schedule_id   bigint      NOT NULL REFERENCES stageq.schedules (id) ON DELETE CASCADE,
    scheduled_for timestamptz NOT NULL,
    -- enqueued, caught-up (one run for missed ticks), missed (dropped),
    -- skipped (singleton: the previous run was unfinished), manual (run-now).
    outcome       text        NOT NULL CHECK (outcome IN ('enqueued', 'caught-up', 'missed', 'skipped', 'manual')),
    process_id    bigint,
    task_count    int         NOT NULL DEFAULT 0,
    worker_id     text        NOT NULL,
    fired_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule_id, scheduled_for)
);

-- Tasks and Logs name the schedule and tick they came from (NULL when enqueued by hand).
ALTER TABLE stageq.tasks ADD COLUMN schedule_name text, ADD COLUMN scheduled_for timestamptz;
ALTER TABLE stageq.logs ADD COLUMN schedule_name text, ADD COLUMN scheduled_for timestamptz;
-- singleton asks whether any task of the schedule is still in the queue.
CREATE INDEX tasks_schedule ON stageq.tasks (schedule_name) WHERE schedule_name IS NOT NULL;
CREATE INDEX logs_schedule ON stageq.logs (schedule_name, scheduled_for) WHERE schedule_name IS NOT NULL;

-- Exclusive leases: a named lock with a holder, an expiry on the database's clock
-- and a fencing token. The row outlives its holders so the token keeps growing:
-- it is incremented whenever a different holder (or the same one after expiry)
-- takes the lease, and kept when the current holder re-acquires (reentrancy).
CREATE TABLE stageq.exclusive_leases (
    name        text        PRIMARY KEY CHECK (name <> '' AND length(name) <= 200),
    holder      text        CHECK (holder <> '' AND length(holder) <= 200),
    token       bigint      NOT NULL,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
