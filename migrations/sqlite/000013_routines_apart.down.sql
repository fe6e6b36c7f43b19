ALTER TABLE stageq_workers DROP COLUMN routines;
DROP TABLE stageq_schema_floor;
