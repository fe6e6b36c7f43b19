-- Back to version 12. The routine schemas (stageq_r<N>) stay: stageq.Enqueue
-- and stageq.Submit forward to the newest of them, and a later install finds
-- and replaces a schema it has no record of. NOT RUN AGAINST A REAL SQL SERVER.
SET XACT_ABORT ON;
BEGIN TRANSACTION;
ALTER TABLE stageq.Workers DROP COLUMN routines;
DROP TABLE stageq.SchemaFloor;
DROP TABLE stageq.Routines;
COMMIT TRANSACTION;
