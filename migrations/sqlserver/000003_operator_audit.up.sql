-- Issue 10: processes may end 'cancelled'; Logs rows record operator actions
-- with the outcomes 'cancelled', 'discarded' and 'retried'. NOT RUN AGAINST A
-- REAL SQL SERVER (see docs/sqlserver.md). ALTER TABLE ... DROP CONSTRAINT and
-- ADD CONSTRAINT ... CHECK: https://learn.microsoft.com/sql/t-sql/statements/alter-table-transact-sql
-- WITH CHECK validates the existing rows, which all satisfy the wider lists.
ALTER TABLE stageq.Processes DROP CONSTRAINT CK_Processes_state;
ALTER TABLE stageq.Processes WITH CHECK ADD CONSTRAINT CK_Processes_state
    CHECK (state IN ('active', 'succeeded', 'failed', 'cancelled'));
ALTER TABLE stageq.Logs DROP CONSTRAINT CK_Logs_outcome;
ALTER TABLE stageq.Logs WITH CHECK ADD CONSTRAINT CK_Logs_outcome
    CHECK (outcome IN ('running', 'succeeded', 'failed', 'abandoned', 'released', 'cancelled', 'discarded', 'retried'));
ALTER TABLE stageq.ScheduleRuns DROP CONSTRAINT CK_ScheduleRuns_outcome;
ALTER TABLE stageq.ScheduleRuns WITH CHECK ADD CONSTRAINT CK_ScheduleRuns_outcome
    CHECK (outcome IN ('enqueued', 'caught-up', 'missed', 'skipped', 'manual', 'failed'));
-- Retention (issue 10, item 16): the latest prune pass, one row. The SQL Server
-- dialect does not prune yet; the table keeps the three schemas alike.
CREATE TABLE stageq.PruneStatus (
    id                  int           NOT NULL,
    worker_id           nvarchar(200) NOT NULL,
    ran_at              datetime2(7)  NOT NULL CONSTRAINT DF_PruneStatus_ran_at DEFAULT (SYSUTCDATETIME()),
    logs_deleted        bigint        NOT NULL CONSTRAINT DF_PruneStatus_logs DEFAULT (0),
    workers_deleted     bigint        NOT NULL CONSTRAINT DF_PruneStatus_workers DEFAULT (0),
    processes_deleted   bigint        NOT NULL CONSTRAINT DF_PruneStatus_processes DEFAULT (0),
    retain_logs_s       bigint        NOT NULL CONSTRAINT DF_PruneStatus_retain_logs DEFAULT (0),
    retain_workers_s    bigint        NOT NULL CONSTRAINT DF_PruneStatus_retain_workers DEFAULT (0),
    retain_processes_s  bigint        NOT NULL CONSTRAINT DF_PruneStatus_retain_processes DEFAULT (0),
    CONSTRAINT PK_PruneStatus PRIMARY KEY CLUSTERED (id),
    CONSTRAINT CK_PruneStatus_id CHECK (id = 1)
);
