-- Version 4 records each SQL body's database session in Logs and lets the rescue
-- end a dead worker's bodies (migrations/postgres/000004_body_sessions.up.sql).
-- NOT YET ON SQL SERVER: Logs.session (@@SPID), the per-attempt session tag and
-- KILL in stageq.Rescue are issue 10's open SQL Server work (docs/sqlserver.md).
-- The file keeps the three dialects' version numbers aligned.
SELECT 1;
