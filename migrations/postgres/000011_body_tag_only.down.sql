-- Back to version 10: the body's start records its backend in Logs again, and the
-- rescue joins on it. Attempts of version 11 have no session recorded.
ALTER TABLE stageq.logs ADD COLUMN session int;

-- Since version 13 the functions this version created or replaced are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/postgres (see migrations/postgres/000013_routines_apart.up.sql).
-- What remains here is the version's change to the tables.
