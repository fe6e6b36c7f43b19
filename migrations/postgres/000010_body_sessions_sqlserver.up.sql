-- Version 10 gives SQL Server what version 4 gave this dialect: a killed worker's
-- SQL bodies are ended by the rescue (migrations/sqlserver/000010_body_sessions_sqlserver.up.sql);
-- nothing changes here: the file keeps the three dialects' version numbers aligned.
SELECT 1;
