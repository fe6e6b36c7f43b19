-- Version 6 is PostgreSQL's leaner claim and completion statements
-- (migrations/postgres/000006_lean_hot_path.up.sql); this dialect has no change at
-- this version: the file keeps the three dialects' version numbers aligned.
SELECT 1;
