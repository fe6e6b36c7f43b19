-- stageq schema for SQLite. SQLite has no schemas, so the tables carry a
-- stageq_ prefix to stay clear of the application's own tables in the same file.
-- Times are UTC text 'YYYY-MM-DD HH:MM:SS.SSS' from the database's clock, which
-- sort and compare as text. golang-migrate wraps this file in a transaction.

CREATE TABLE stageq_processes (
    -- AUTOINCREMENT: ids are never reused, so Logs rows name one process and one task
    -- for ever, even after they leave their tables (plain rowids would be recycled).
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT    NOT NULL UNIQUE CHECK (name <> '' AND length(name) <= 200),
    state         TEXT    NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'succeeded', 'failed')),
    -- The lowest ExecutionOrder that still has tasks; NULL when the process has none.
    current_order INTEGER,
    -- Fair scheduling (see the PostgreSQL schema for the design).
    priority      INTEGER NOT NULL DEFAULT 0,
    weight        INTEGER NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000),
    max_parallel  INTEGER CHECK (max_parallel >= 1),
    paused        INTEGER NOT NULL DEFAULT 0,
    -- Stride scheduling's virtual time: lower is served first.
    pass          INTEGER NOT NULL DEFAULT 0,
    -- Has available tasks, is not paused, runs fewer than max_parallel (refreshProcess).
    runnable      INTEGER NOT NULL DEFAULT 0,
    -- The earliest run_at among its available tasks.
    ready_at      TEXT,
    created_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    finished_at   TEXT
);

-- The default process holds nothing yet: it has nothing left to do.
INSERT INTO stageq_processes (name, state) VALUES ('default', 'succeeded');

CREATE INDEX stageq_processes_queue ON stageq_processes (priority DESC, pass, id) WHERE runnable = 1;
CREATE INDEX stageq_processes_vtime ON stageq_processes (pass) WHERE runnable = 1;

CREATE TABLE stageq_tasks (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    process_id       INTEGER NOT NULL REFERENCES stageq_processes (id),
    execution_order  INTEGER NOT NULL CHECK (execution_order >= 0),
    kind             TEXT    NOT NULL DEFAULT 'sql' CHECK (kind <> '' AND length(kind) <= 200),
    body             TEXT    NOT NULL CHECK (body <> ''),
    state            TEXT    NOT NULL CHECK (state IN ('blocked', 'available', 'running', 'failed')),
    priority         INTEGER NOT NULL DEFAULT 0,
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    atomic           INTEGER NOT NULL DEFAULT 0,
    run_at           TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    limit_key        TEXT    CHECK (limit_key <> '' AND length(limit_key) <= 200),
    worker_id        TEXT,
    lease_token      INTEGER,
    lease_expires_at TEXT,
    last_error       TEXT,
    schedule_name    TEXT,
    scheduled_for    TEXT,
    created_at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

CREATE INDEX stageq_tasks_claim_process ON stageq_tasks (process_id, priority DESC, run_at, id) WHERE state = 'available';
CREATE INDEX stageq_tasks_ready ON stageq_tasks (process_id, run_at) WHERE state = 'available';
CREATE INDEX stageq_tasks_stage ON stageq_tasks (process_id, execution_order);
CREATE INDEX stageq_tasks_failed ON stageq_tasks (process_id) WHERE state = 'failed';
CREATE INDEX stageq_tasks_lease ON stageq_tasks (lease_expires_at) WHERE state = 'running';
CREATE INDEX stageq_tasks_worker ON stageq_tasks (worker_id) WHERE state = 'running';
CREATE INDEX stageq_tasks_running_process ON stageq_tasks (process_id) WHERE state = 'running';
CREATE INDEX stageq_tasks_running_limit ON stageq_tasks (limit_key) WHERE state = 'running' AND limit_key IS NOT NULL;
CREATE INDEX stageq_tasks_running_kind ON stageq_tasks (kind) WHERE state = 'running';
CREATE INDEX stageq_tasks_schedule ON stageq_tasks (schedule_name) WHERE schedule_name IS NOT NULL;

-- Named limits ('erp-api') and kind limits ('kind:<kind>'); no row: unlimited.
CREATE TABLE stageq_limits (
    key         TEXT    PRIMARY KEY CHECK (key <> '' AND length(key) <= 200),
    max_running INTEGER NOT NULL CHECK (max_running >= 0),
    updated_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

CREATE TABLE stageq_logs (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id         INTEGER NOT NULL,
    process_id      INTEGER NOT NULL,
    process_name    TEXT    NOT NULL,
    execution_order INTEGER NOT NULL,
    kind            TEXT    NOT NULL,
    body            TEXT    NOT NULL,
    worker_id       TEXT    NOT NULL,
    attempt         INTEGER NOT NULL,
    lease_token     INTEGER NOT NULL,
    started_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    ended_at        TEXT,
    duration_ms     INTEGER,
    outcome         TEXT    NOT NULL DEFAULT 'running'
        CHECK (outcome IN ('running', 'succeeded', 'failed', 'abandoned', 'released')),
    error           TEXT,
    retry_at        TEXT,
    schedule_name   TEXT,
    scheduled_for   TEXT
);

CREATE INDEX stageq_logs_task ON stageq_logs (task_id, lease_token);
CREATE INDEX stageq_logs_process ON stageq_logs (process_id, started_at);
CREATE INDEX stageq_logs_started ON stageq_logs (started_at);
CREATE INDEX stageq_logs_schedule ON stageq_logs (schedule_name, scheduled_for) WHERE schedule_name IS NOT NULL;

CREATE TABLE stageq_workers (
    id           TEXT    PRIMARY KEY,
    hostname     TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    concurrency  INTEGER NOT NULL,
    version      TEXT    NOT NULL DEFAULT '',
    started_at   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    heartbeat_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    stopped_at   TEXT
);

-- Recurring schedules and exclusive leases. See the PostgreSQL schema for the
-- design; here every writer holds SQLite's write lock (BEGIN IMMEDIATE), which
-- serialises the schedulers of all workers, so locking the due row is implicit.
CREATE TABLE stageq_schedules (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    name           TEXT    NOT NULL UNIQUE CHECK (name <> '' AND length(name) <= 200),
    cron           TEXT    CHECK (cron <> '' AND length(cron) <= 200),
    interval_ms    INTEGER CHECK (interval_ms > 0),
    plan           TEXT    NOT NULL,
    missed         TEXT    NOT NULL DEFAULT 'skip' CHECK (missed IN ('skip', 'once')),
    grace_ms       INTEGER NOT NULL DEFAULT 60000 CHECK (grace_ms >= 0),
    singleton      INTEGER NOT NULL DEFAULT 0,
    paused         INTEGER NOT NULL DEFAULT 0,
    next_run       TEXT    NOT NULL,
    last_run       TEXT,
    last_outcome   TEXT,
    last_worker_id TEXT,
    last_fired_at  TEXT,
    created_at     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    CHECK ((cron IS NULL) <> (interval_ms IS NULL))
);

CREATE INDEX stageq_schedules_due ON stageq_schedules (next_run) WHERE paused = 0;

CREATE TABLE stageq_schedule_runs (
    schedule_id   INTEGER NOT NULL REFERENCES stageq_schedules (id) ON DELETE CASCADE,
    scheduled_for TEXT    NOT NULL,
    outcome       TEXT    NOT NULL CHECK (outcome IN ('enqueued', 'caught-up', 'missed', 'skipped', 'manual')),
    process_id    INTEGER,
    task_count    INTEGER NOT NULL DEFAULT 0,
    worker_id     TEXT    NOT NULL,
    fired_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    PRIMARY KEY (schedule_id, scheduled_for)
);

CREATE TABLE stageq_exclusive_leases (
    name        TEXT    PRIMARY KEY CHECK (name <> '' AND length(name) <= 200),
    holder      TEXT    CHECK (holder <> '' AND length(holder) <= 200),
    token       INTEGER NOT NULL,
    acquired_at TEXT    NOT NULL,
    expires_at  TEXT    NOT NULL,
    updated_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
