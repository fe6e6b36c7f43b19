ALTER TABLE stageq_logs DROP COLUMN session;
