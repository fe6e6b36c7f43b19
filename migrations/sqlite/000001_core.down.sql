DROP TABLE IF EXISTS stageq_exclusive_leases;
DROP TABLE IF EXISTS stageq_schedule_runs;
DROP TABLE IF EXISTS stageq_schedules;
DROP TABLE IF EXISTS stageq_limits;
DROP TABLE IF EXISTS stageq_workers;
DROP TABLE IF EXISTS stageq_logs;
DROP TABLE IF EXISTS stageq_tasks;
DROP TABLE IF EXISTS stageq_processes;
