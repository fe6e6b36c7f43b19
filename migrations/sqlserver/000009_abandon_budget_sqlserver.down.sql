-- Back to version 8: stageq.Claim as version 7 wrote it, stageq.FinishMany,
-- stageq.Finish and stageq.Rescue as version 2 wrote them (an expired lease
-- counts against max_attempts again; the outcome 'abandoned' is refused), and no
-- Tasks.abandons. Each abandon budget spent is forgotten. NOT RUN AGAINST A REAL
-- SQL SERVER. The column's DEFAULT constraint must go before the column.
-- https://learn.microsoft.com/sql/t-sql/statements/alter-table-transact-sql

SET XACT_ABORT ON;
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;

BEGIN TRANSACTION;

-- IF EXISTS (2016+): an engine that keeps no named defaults (Babelfish) has none
-- to drop, as in version 2.
ALTER TABLE stageq.Tasks DROP CONSTRAINT IF EXISTS DF_Tasks_abandons;
ALTER TABLE stageq.Tasks DROP COLUMN abandons;

COMMIT TRANSACTION;

-- Since version 13 the procedures this version created or altered are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/sqlserver (see migrations/sqlserver/000013_routines_apart.up.sql).
