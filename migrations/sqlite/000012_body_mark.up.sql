-- Version 12 marks PostgreSQL's SQL bodies with their attempt instead of
-- renaming their session (migrations/postgres/000012_body_mark.up.sql); no
-- change here: the file keeps the three dialects' version numbers aligned.
SELECT 1;
