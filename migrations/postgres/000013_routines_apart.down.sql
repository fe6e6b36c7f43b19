-- Back to version 12. A version-12 binary calls the functions that migrations
-- 1 to 12 used to create in schema stageq (stageq.claim and the rest). Only a
-- database migrated to 12 by an older release has them: this release's
-- migrations 1 to 12 create tables only, and its logic lives in stageq_r<N>.
-- On a database that lacks them the way down stops here, before any table
-- changes, rather than leave a schema at 12 that a version-12 worker accepts
-- and then fails on at its first claim. golang-migrate has already recorded
-- version 12, dirty, when this runs: `migrate force 13` puts the record back.
-- (To remove stageq from such a database altogether: DROP SCHEMA stageq
-- CASCADE, and each stageq_r<N>.)
DO $$ BEGIN
    IF to_regproc('stageq.claim') IS NULL THEN
        RAISE EXCEPTION 'stageq: schema version 13 cannot be migrated down to 12 on this database: it has no version-12 routines (stageq.claim), so a version-12 binary could not run on it. No table changed; run `migrate force 13` to clear the dirty version 12 golang-migrate recorded';
    END IF;
END $$;

-- The routine schemas (stageq_r<N>) stay: stageq.enqueue and stageq.submit
-- forward to the newest of them, and a later install finds and replaces a
-- schema it has no record of.
ALTER TABLE stageq.workers DROP COLUMN routines;
DROP TABLE stageq.schema_floor;
DROP TABLE stageq.routines;
