-- Back to version 3: stageq.rescue as migration 000002 defined it.

ALTER TABLE stageq.logs DROP COLUMN session;

-- Since version 13 the functions this version created or replaced are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/postgres (see migrations/postgres/000013_routines_apart.up.sql).
-- What remains here is the version's change to the tables.
