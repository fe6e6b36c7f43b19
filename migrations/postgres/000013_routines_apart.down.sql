-- Back to version 12. The routine schemas (stageq_r<N>) stay: stageq.enqueue
-- and stageq.submit forward to the newest of them, and a later install finds
-- and replaces a schema it has no record of.
ALTER TABLE stageq.workers DROP COLUMN routines;
DROP TABLE stageq.schema_floor;
DROP TABLE stageq.routines;
