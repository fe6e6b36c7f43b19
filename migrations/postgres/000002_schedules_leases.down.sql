DROP TABLE IF EXISTS stageq.exclusive_leases;
DROP INDEX IF EXISTS stageq.logs_schedule;
DROP INDEX IF EXISTS stageq.tasks_schedule;
ALTER TABLE stageq.logs DROP COLUMN IF EXISTS scheduled_for, DROP COLUMN IF EXISTS schedule_name;
ALTER TABLE stageq.tasks DROP COLUMN IF EXISTS scheduled_for, DROP COLUMN IF EXISTS schedule_name;
DROP TABLE IF EXISTS stageq.schedule_runs;
DROP TABLE IF EXISTS stageq.schedules;
