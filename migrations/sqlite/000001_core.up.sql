-- stageq core schema for SQLite. SQLite has no schemas, so the tables carry a
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
    created_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    finished_at   TEXT
);

INSERT INTO stageq_processes (name) VALUES ('default');

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
    worker_id        TEXT,
    lease_token      INTEGER,
    lease_expires_at TEXT,
    last_error       TEXT,
    created_at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

CREATE INDEX stageq_tasks_claim ON stageq_tasks (priority DESC, run_at, id) WHERE state = 'available';
CREATE INDEX stageq_tasks_stage ON stageq_tasks (process_id, execution_order);
CREATE INDEX stageq_tasks_lease ON stageq_tasks (lease_expires_at) WHERE state = 'running';
CREATE INDEX stageq_tasks_worker ON stageq_tasks (worker_id) WHERE state = 'running';

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
    retry_at        TEXT
);

CREATE INDEX stageq_logs_task ON stageq_logs (task_id, lease_token);
CREATE INDEX stageq_logs_process ON stageq_logs (process_id, started_at);
CREATE INDEX stageq_logs_started ON stageq_logs (started_at);

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
