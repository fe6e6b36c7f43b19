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

-- Since version 13 the functions this version created or replaced are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/postgres (see migrations/postgres/000013_routines_apart.up.sql).
-- What remains here is the version's change to the tables.
