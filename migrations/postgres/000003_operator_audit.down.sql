-- stageq.validate_tasks and its helpers stay: migration 000002's stageq.submit
-- calls it, and the stricter body refuses nothing the CLI accepts.
DROP TABLE IF EXISTS stageq.prune_status;
DROP INDEX IF EXISTS stageq.processes_finished;
DELETE FROM stageq.schedule_runs WHERE outcome = 'failed';
ALTER TABLE stageq.schedule_runs DROP CONSTRAINT IF EXISTS schedule_runs_outcome_check;
ALTER TABLE stageq.schedule_runs ADD CONSTRAINT schedule_runs_outcome_check
    CHECK (outcome IN ('enqueued', 'caught-up', 'missed', 'skipped', 'manual'));
UPDATE stageq.processes SET state = 'succeeded' WHERE state = 'cancelled';
DELETE FROM stageq.logs WHERE outcome IN ('cancelled', 'discarded', 'retried');
ALTER TABLE stageq.processes DROP CONSTRAINT IF EXISTS processes_state_check;
ALTER TABLE stageq.processes ADD CONSTRAINT processes_state_check
    CHECK (state IN ('active', 'succeeded', 'failed'));
ALTER TABLE stageq.logs DROP CONSTRAINT IF EXISTS logs_outcome_check;
ALTER TABLE stageq.logs ADD CONSTRAINT logs_outcome_check
    CHECK (outcome IN ('running', 'succeeded', 'failed', 'abandoned', 'released'));
