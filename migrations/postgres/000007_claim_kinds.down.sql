-- Back to version 6: a claim that leases every kind.

ALTER TABLE stageq.workers DROP COLUMN kinds;

-- Since version 13 the functions this version created or replaced are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/postgres (see migrations/postgres/000013_routines_apart.up.sql).
-- What remains here is the version's change to the tables.
