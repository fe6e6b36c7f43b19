DROP TABLE IF EXISTS stageq_exclusive_leases;
DROP INDEX IF EXISTS stageq_logs_schedule;
DROP INDEX IF EXISTS stageq_tasks_schedule;
ALTER TABLE stageq_logs DROP COLUMN scheduled_for;
ALTER TABLE stageq_logs DROP COLUMN schedule_name;
ALTER TABLE stageq_tasks DROP COLUMN scheduled_for;
ALTER TABLE stageq_tasks DROP COLUMN schedule_name;
DROP TABLE IF EXISTS stageq_schedule_runs;
DROP TABLE IF EXISTS stageq_schedules;
