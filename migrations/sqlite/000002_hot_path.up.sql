-- Version 2 is PostgreSQL's lock-free claim and completion path (see
-- migrations/postgres/000002_hot_path.up.sql). This dialect has no change at this
-- version: the file keeps the version numbers of the three dialects aligned.
SELECT 1;
