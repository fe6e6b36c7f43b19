-- Back to version 5: its finish_many, version 2's claim, with Logs' fillfactor 80.
ALTER TABLE stageq.logs SET (fillfactor = 80);

-- Since version 13 the functions this version created or replaced are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/postgres (see migrations/postgres/000013_routines_apart.up.sql).
-- What remains here is the version's change to the tables.
