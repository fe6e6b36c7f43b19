-- Back to version 12. A version-12 binary calls the procedures that migrations
-- 1 to 12 used to create in schema stageq (stageq.Claim and the rest). Only a
-- database migrated to 12 by an older release has them: this release's
-- migrations 1 to 12 create tables only, and its logic lives in stageq_r<N>.
-- On a database that lacks them the way down stops here, before any table
-- changes, rather than leave a schema at 12 that a version-12 worker accepts
-- and then fails on at its first claim. golang-migrate has already recorded
-- version 12, dirty, when this runs: `migrate force 13` puts the record back.
-- THROW (severity 16) ends the batch.
-- https://learn.microsoft.com/sql/t-sql/language-elements/throw-transact-sql
-- https://learn.microsoft.com/sql/t-sql/functions/object-id-transact-sql
-- The routine schemas (stageq_r<N>) stay: stageq.Enqueue and stageq.Submit
-- forward to the newest of them, and a later install finds and replaces a
-- schema it has no record of. NOT RUN AGAINST A REAL SQL SERVER.
IF OBJECT_ID(N'stageq.Claim', N'P') IS NULL
    THROW 50131, N'stageq: schema version 13 cannot be migrated down to 12 on this database: it has no version-12 procedures (stageq.Claim), so a version-12 binary could not run on it. No table changed; run `migrate force 13` to clear the dirty version 12 golang-migrate recorded', 1;
SET XACT_ABORT ON;
BEGIN TRANSACTION;
ALTER TABLE stageq.Workers DROP COLUMN routines;
DROP TABLE stageq.SchemaFloor;
DROP TABLE stageq.Routines;
COMMIT TRANSACTION;
