ALTER TABLE stageq_tasks DROP COLUMN abandons;
