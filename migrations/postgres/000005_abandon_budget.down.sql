-- Back to version 4: stageq.rescue as version 4 and stageq.finish_many as
-- version 2 defined them.

ALTER TABLE stageq.tasks DROP COLUMN abandons;

-- Since version 13 the functions this version created or replaced are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/postgres (see migrations/postgres/000013_routines_apart.up.sql).
-- What remains here is the version's change to the tables.
