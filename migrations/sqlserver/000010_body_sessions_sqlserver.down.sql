-- Back to version 9: stageq.Rescue as version 9 wrote it (it frees an expired
-- lease without ending the attempt's body), no stageq.BodySession and no
-- Logs.session. NOT RUN AGAINST A REAL SQL SERVER. Rescue is altered first, so
-- nothing refers to the column when it is dropped. Sessions already tagged keep
-- their CONTEXT_INFO until they end; nothing reads it any more.
-- https://learn.microsoft.com/sql/t-sql/statements/drop-procedure-transact-sql
-- https://learn.microsoft.com/sql/t-sql/statements/alter-table-transact-sql

SET XACT_ABORT ON;
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;

BEGIN TRANSACTION;

ALTER TABLE stageq.Logs DROP COLUMN [session];

COMMIT TRANSACTION;

-- Since version 13 the procedures this version created or altered are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/sqlserver (see migrations/sqlserver/000013_routines_apart.up.sql).
