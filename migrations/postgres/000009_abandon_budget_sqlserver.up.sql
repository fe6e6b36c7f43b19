-- Version 9 gives SQL Server the abandon budget that version 5 gave this dialect
-- (migrations/sqlserver/000009_abandon_budget_sqlserver.up.sql); nothing changes
-- here: the file keeps the three dialects' version numbers aligned.
SELECT 1;
