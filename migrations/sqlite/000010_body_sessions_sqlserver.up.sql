-- Version 10 gives SQL Server what version 4 gave PostgreSQL: the rescue ends a
-- killed worker's SQL bodies (migrations/sqlserver/000010_body_sessions_sqlserver.up.sql).
-- SQLite runs bodies inside the worker process, so nothing changes here: the file
-- keeps the three dialects' version numbers aligned.
SELECT 1;
