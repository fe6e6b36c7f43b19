-- Back to version 11: a body is found by its session's name alone.

-- Since version 13 the functions this version created or replaced are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/postgres (see migrations/postgres/000013_routines_apart.up.sql).
-- This version changed no table: the statement below keeps the file a
-- migration.
SELECT 1;
