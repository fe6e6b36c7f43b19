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
