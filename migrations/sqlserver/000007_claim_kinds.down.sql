-- Back to version 6: stageq.Claim as version 2 wrote it (every kind), and no
-- kinds recorded on Workers.

ALTER TABLE stageq.Workers DROP COLUMN kinds;

-- Since version 13 the procedures this version created or altered are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/sqlserver (see migrations/sqlserver/000013_routines_apart.up.sql).
