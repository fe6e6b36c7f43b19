-- Recurring schedules and exclusive leases (issue 5). See the PostgreSQL file of
-- the same version for the design; here every writer holds SQLite's write lock
-- (BEGIN IMMEDIATE), which serialises the schedulers of all workers, so locking
-- the due row is implicit. Times are UTC text from the database's clock.

CREATE TABLE stageq_schedules (
    id             INTEGER PRIMARY KEY,
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

ALTER TABLE stageq_tasks ADD COLUMN schedule_name TEXT;
ALTER TABLE stageq_tasks ADD COLUMN scheduled_for TEXT;
ALTER TABLE stageq_logs ADD COLUMN schedule_name TEXT;
ALTER TABLE stageq_logs ADD COLUMN scheduled_for TEXT;
CREATE INDEX stageq_tasks_schedule ON stageq_tasks (schedule_name) WHERE schedule_name IS NOT NULL;
CREATE INDEX stageq_logs_schedule ON stageq_logs (schedule_name, scheduled_for) WHERE schedule_name IS NOT NULL;

CREATE TABLE stageq_exclusive_leases (
    name        TEXT    PRIMARY KEY CHECK (name <> '' AND length(name) <= 200),
    holder      TEXT    CHECK (holder <> '' AND length(holder) <= 200),
    token       INTEGER NOT NULL,
    acquired_at TEXT    NOT NULL,
    expires_at  TEXT    NOT NULL,
    updated_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
