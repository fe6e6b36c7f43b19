-- Version 11 makes PostgreSQL's body start write nothing
-- (migrations/postgres/000011_body_tag_only.up.sql); no change here: the file
-- keeps the three dialects' version numbers aligned.
SELECT 1;
