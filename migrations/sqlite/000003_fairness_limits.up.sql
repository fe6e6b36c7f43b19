-- Fair scheduling across processes and cluster-wide concurrency limits (see the
-- PostgreSQL file of this version for the design). SQLite serialises writers, so
-- the claim (dialect/sqlite/claim.go) runs the same rounds in Go under BEGIN
-- IMMEDIATE; the columns and indexes are the same.

ALTER TABLE stageq_processes ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE stageq_processes ADD COLUMN weight INTEGER NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000);
ALTER TABLE stageq_processes ADD COLUMN max_parallel INTEGER CHECK (max_parallel >= 1);
ALTER TABLE stageq_processes ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
-- Stride scheduling's virtual time: lower is served first.
ALTER TABLE stageq_processes ADD COLUMN pass INTEGER NOT NULL DEFAULT 0;
-- Has available tasks, is not paused, runs fewer than max_parallel (refreshProcess).
ALTER TABLE stageq_processes ADD COLUMN runnable INTEGER NOT NULL DEFAULT 0;
-- The earliest run_at among its available tasks.
ALTER TABLE stageq_processes ADD COLUMN ready_at TEXT;

ALTER TABLE stageq_tasks ADD COLUMN limit_key TEXT CHECK (limit_key <> '' AND length(limit_key) <= 200);

-- Named limits ('erp-api') and kind limits ('kind:<kind>'); no row: unlimited.
CREATE TABLE stageq_limits (
    key         TEXT    PRIMARY KEY CHECK (key <> '' AND length(key) <= 200),
    max_running INTEGER NOT NULL CHECK (max_running >= 0),
    updated_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

DROP INDEX stageq_tasks_claim;
CREATE INDEX stageq_tasks_claim_process ON stageq_tasks (process_id, priority DESC, run_at, id) WHERE state = 'available';
CREATE INDEX stageq_tasks_ready ON stageq_tasks (process_id, run_at) WHERE state = 'available';
CREATE INDEX stageq_tasks_running_process ON stageq_tasks (process_id) WHERE state = 'running';
CREATE INDEX stageq_tasks_running_limit ON stageq_tasks (limit_key) WHERE state = 'running' AND limit_key IS NOT NULL;
CREATE INDEX stageq_tasks_running_kind ON stageq_tasks (kind) WHERE state = 'running';
CREATE INDEX stageq_processes_queue ON stageq_processes (priority DESC, pass, id) WHERE runnable = 1;
CREATE INDEX stageq_processes_vtime ON stageq_processes (pass) WHERE runnable = 1;

-- Existing processes: derive their run-queue state once (no caps or pauses yet).
UPDATE stageq_processes
   SET ready_at = (SELECT min(t.run_at) FROM stageq_tasks t WHERE t.process_id = stageq_processes.id AND t.state = 'available');
UPDATE stageq_processes SET runnable = CASE WHEN ready_at IS NULL THEN 0 ELSE 1 END;
