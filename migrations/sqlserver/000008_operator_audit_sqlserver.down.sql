-- Back to version 7: stageq.OpenStage as version 2 defined it (without
-- @EndState), and the processes version 8 ended 'cancelled' shown as version 7
-- would have ended them, 'succeeded' (the CHECK constraint of 000003 still allows
-- 'cancelled', but no version-7 statement writes or lists it). The operators'
-- Logs rows stay: their outcomes are valid at version 7 too. Not run on a SQL
-- Server.
-- https://learn.microsoft.com/sql/t-sql/statements/alter-procedure-transact-sql

SET XACT_ABORT ON;
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;

BEGIN TRANSACTION;

UPDATE stageq.Processes SET state = 'succeeded' WHERE state = 'cancelled';

COMMIT TRANSACTION;

-- Since version 13 the procedures this version created or altered are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/sqlserver (see migrations/sqlserver/000013_routines_apart.up.sql).
