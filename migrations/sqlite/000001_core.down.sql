DROP TABLE IF EXISTS stageq_workers;
DROP TABLE IF EXISTS stageq_logs;
DROP TABLE IF EXISTS stageq_tasks;
DROP TABLE IF EXISTS stageq_processes;
