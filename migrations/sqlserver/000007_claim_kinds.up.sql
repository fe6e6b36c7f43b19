-- Version 7: workers claim only the kinds they can run (issue 10, item 5; the
-- design is in migrations/postgres/000007_claim_kinds.up.sql). stageq.Claim gains
-- @Kinds, a JSON array of the kinds the worker runs (NULL, the default: every
-- kind, so a caller of version 6 keeps working), applied as a filter on the walk
-- of IX_Tasks_Claim on both paths; Workers records each worker's kinds for
-- `queuectl why`. The procedure is altered through EXEC so that it compiles
-- after the ALTER TABLE in this same batch, as in version 2. Written from
-- Microsoft's documentation (OPENJSON, ISJSON, ALTER TABLE, ALTER PROCEDURE);
-- not run on a SQL Server here.
-- https://learn.microsoft.com/sql/t-sql/functions/openjson-transact-sql
-- https://learn.microsoft.com/sql/t-sql/functions/isjson-transact-sql
ALTER TABLE stageq.Workers ADD kinds nvarchar(max) NULL;

-- Since version 13 the procedures this version created or altered are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/sqlserver (see migrations/sqlserver/000013_routines_apart.up.sql).
