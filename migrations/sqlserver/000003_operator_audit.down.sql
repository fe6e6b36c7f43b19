DROP TABLE IF EXISTS stageq.PruneStatus;
DELETE FROM stageq.ScheduleRuns WHERE outcome = 'failed';
ALTER TABLE stageq.ScheduleRuns DROP CONSTRAINT CK_ScheduleRuns_outcome;
ALTER TABLE stageq.ScheduleRuns WITH CHECK ADD CONSTRAINT CK_ScheduleRuns_outcome
    CHECK (outcome IN ('enqueued', 'caught-up', 'missed', 'skipped', 'manual'));
UPDATE stageq.Processes SET state = 'succeeded' WHERE state = 'cancelled';
DELETE FROM stageq.Logs WHERE outcome IN ('cancelled', 'discarded', 'retried');
ALTER TABLE stageq.Processes DROP CONSTRAINT CK_Processes_state;
ALTER TABLE stageq.Processes WITH CHECK ADD CONSTRAINT CK_Processes_state
    CHECK (state IN ('active', 'succeeded', 'failed'));
ALTER TABLE stageq.Logs DROP CONSTRAINT CK_Logs_outcome;
ALTER TABLE stageq.Logs WITH CHECK ADD CONSTRAINT CK_Logs_outcome
    CHECK (outcome IN ('running', 'succeeded', 'failed', 'abandoned', 'released'));
