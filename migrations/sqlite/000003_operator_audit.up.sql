-- Issue 10: a process that an operator's cancel or discard emptied ends
-- 'cancelled', and operator actions leave Logs rows with the outcomes
-- 'cancelled', 'discarded' and 'retried' (worker_id: who, user@host); a schedule
-- tick whose run the database refused is recorded 'failed' (item 13).
--
-- SQLite cannot ALTER a CHECK constraint, and rebuilding stageq_processes is not
-- possible inside this transaction (stageq_tasks references it and foreign keys
-- are on). SQLite's documented procedure for loosening a constraint is used
-- instead (https://www.sqlite.org/lang_altertable.html, "otherwise"): rewrite the
-- table's text in sqlite_schema. Only the three CHECK lists change, and each only
-- gains values, so every existing row still satisfies them. writable_schema =
-- RESET makes this connection reload the schema; the dummy table bumps
-- schema_version so every other connection reloads it too.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
   SET sql = replace(sql, 'CHECK (state IN (''active'', ''succeeded'', ''failed''))',
                          'CHECK (state IN (''active'', ''succeeded'', ''failed'', ''cancelled''))')
 WHERE type = 'table' AND name = 'stageq_processes';
UPDATE sqlite_schema
   SET sql = replace(sql, 'CHECK (outcome IN (''running'', ''succeeded'', ''failed'', ''abandoned'', ''released''))',
                          'CHECK (outcome IN (''running'', ''succeeded'', ''failed'', ''abandoned'', ''released'', ''cancelled'', ''discarded'', ''retried''))')
 WHERE type = 'table' AND name = 'stageq_logs';
UPDATE sqlite_schema
   SET sql = replace(sql, 'CHECK (outcome IN (''enqueued'', ''caught-up'', ''missed'', ''skipped'', ''manual''))',
                          'CHECK (outcome IN (''enqueued'', ''caught-up'', ''missed'', ''skipped'', ''manual'', ''failed''))')
 WHERE type = 'table' AND name = 'stageq_schedule_runs';
PRAGMA writable_schema = RESET;
CREATE TABLE stageq_schema_bump (x INTEGER);
DROP TABLE stageq_schema_bump;

-- Retention (issue 10, item 16): see the PostgreSQL schema.
CREATE TABLE stageq_prune_status (
    id                  INTEGER PRIMARY KEY CHECK (id = 1),
    worker_id           TEXT    NOT NULL,
    ran_at              TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    logs_deleted        INTEGER NOT NULL DEFAULT 0,
    workers_deleted     INTEGER NOT NULL DEFAULT 0,
    processes_deleted   INTEGER NOT NULL DEFAULT 0,
    retain_logs_s       INTEGER NOT NULL DEFAULT 0,
    retain_workers_s    INTEGER NOT NULL DEFAULT 0,
    retain_processes_s  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX stageq_processes_finished ON stageq_processes (finished_at) WHERE finished_at IS NOT NULL;
