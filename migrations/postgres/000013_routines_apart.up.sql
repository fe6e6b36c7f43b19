-- Version 13: the routines leave the table schema (issue 12).
--
-- The functions of the claim, the stage barrier, fairness, completion and
-- rescue were created by migrations 1 to 12 in schema stageq, so every change
-- of logic was a schema version, and a binary refused every version but its
-- own: a cluster could not be upgraded one worker at a time. From now on they
-- live in routines/postgres, are installed by the routines package into a
-- schema per version (stageq_r1, stageq_r2, …) and recorded here; a binary
-- calls only its own version's. This migration makes the room:
--
-- * stageq.routines records each installed version and the checksum of its
--   sources, so two builds that disagree on what version N is are caught;
-- * stageq.schema_floor holds the oldest binary schema version the tables
--   still serve. A later migration that only adds leaves it alone, so the
--   previous release's workers keep running and restarting beside the new
--   ones; one that takes something away raises it (migrations.Check);
-- * stageq.workers.routines records which version each worker calls, so that
--   `queuectl migrate prune-routines` drops only versions no live worker calls.
--
-- A database migrated before version 13 keeps the functions migrations 1 to 12
-- created in schema stageq: version-12 workers still running during the
-- upgrade call them (those migrations now hold table changes only, so a new
-- database never has them). stageq.enqueue and stageq.submit, which users'
-- SQL calls, are replaced by the install with forwards to the newest routines
-- (routines/postgres/public).
CREATE TABLE stageq.routines (
    version      int         PRIMARY KEY CHECK (version >= 1),
    checksum     text        NOT NULL,
    installed_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE stageq.schema_floor (
    id            int PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    oldest_binary int NOT NULL
);
INSERT INTO stageq.schema_floor (oldest_binary) VALUES (13);

ALTER TABLE stageq.workers ADD COLUMN routines int;
