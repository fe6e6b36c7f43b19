ALTER TABLE stageq_workers DROP COLUMN kinds;
