-- Version 13: routines are versioned apart from the tables
-- (migrations/postgres/000013_routines_apart.up.sql). SQLite keeps its logic
-- in Go, so it installs no routines; it gets the same floor, which says the
-- oldest binary schema version these tables still serve, and the workers'
-- routines column, left empty, so that its tables match the other dialects'.
CREATE TABLE stageq_schema_floor (
    id            INTEGER PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    oldest_binary INTEGER NOT NULL
);
INSERT INTO stageq_schema_floor (oldest_binary) VALUES (13);

ALTER TABLE stageq_workers ADD COLUMN routines INTEGER;
