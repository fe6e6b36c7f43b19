-- Version 9: the abandon budget on SQL Server (issue 10, item 14), which version 5
-- gave PostgreSQL and SQLite (migrations/postgres/000005_abandon_budget.up.sql has
-- the design; this dialect's 000005 is a placeholder, kept as applied).
--
-- An attempt lost to infrastructure -- its lease expired and stageq.Rescue took
-- the task back (the worker died or froze), or the worker reports the outcome
-- 'abandoned' to stageq.FinishMany / stageq.Finish (the body's database
-- connection was cut) -- is logged 'abandoned' and counted in Tasks.abandons, not
-- against max_attempts: Tasks.attempt still numbers every run (Logs.attempt), so
-- the attempts charged to the task are attempt - abandons (the worker computes
-- its retries from that; stageq.Claim now returns abandons). The task goes back
-- like a released one (available, or blocked when its stage is not the open one
-- or its process is paused), with last_error "<cause> (abandoned N of 10 times;
-- not counted against max_attempts)". The 10th abandon fails the task for good
-- ("<cause>; abandoned 10 times (...): failed for good") and its process with it,
-- as a final failure does. The budget, 10 as PostgreSQL's stageq.max_abandons(),
-- is a local @MaxAbandons in stageq.Rescue and stageq.FinishMany. An operator's
-- retry resets abandons with attempt (dialect/sqlserver/operate.go).
--
-- Each procedure below is its newest definition copied whole (Claim: version 7;
-- FinishMany, Finish, Rescue: version 2) with only those changes. They are
-- altered through EXEC so that each compiles after the ALTER TABLE of this same
-- batch, as in versions 2 and 7; quotes inside are doubled. One transaction: a
-- failure leaves version 8 as it was. Written from Microsoft's documentation; NOT
-- RUN AGAINST A REAL SQL SERVER (nor Babelfish): see docs/sqlserver.md.
--
-- ALTER TABLE ... ADD <column> int NOT NULL CONSTRAINT <name> DEFAULT (0): the
-- existing rows get the default. On Enterprise edition (2012 and later) that is
-- an online, metadata-only change for a runtime-constant default; on other
-- editions it may write every row of stageq.Tasks (unfinished tasks only) under
-- the table's schema-modification lock, so migrate with the workers stopped.
-- https://learn.microsoft.com/sql/t-sql/statements/alter-table-transact-sql
-- In an UPDATE a column named on the right of SET is read as it was before the
-- statement (abandons + 1 in the new state and error text is the new count; version
-- 2's attempt = t.attempt - 1 relies on the same), and OUTPUT inserted.<column>
-- returns the value after it.
-- https://learn.microsoft.com/sql/t-sql/queries/update-transact-sql
-- https://learn.microsoft.com/sql/t-sql/queries/output-clause-transact-sql
-- CONCAT turns numbers into text and NULL into ''; with an nvarchar(max) argument
-- the result is nvarchar(max).
-- https://learn.microsoft.com/sql/t-sql/functions/concat-transact-sql
-- https://learn.microsoft.com/sql/t-sql/statements/alter-procedure-transact-sql

SET XACT_ABORT ON;
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;

BEGIN TRANSACTION;

ALTER TABLE stageq.Tasks ADD abandons int NOT NULL CONSTRAINT DF_Tasks_abandons DEFAULT (0);

-- stageq.Claim (version 7) also returns each task's abandons, after atomic.

-- stageq.FinishMany (version 2) also takes the outcome 'abandoned': the task goes
-- back like a released one and counts against its abandon budget; its Logs row
-- gets the abandon error (the cause, and the count).

-- stageq.Finish (version 2) lets the outcome 'abandoned' through to FinishMany.

-- stageq.Rescue (version 2): an expired lease counts against the task's abandon
-- budget, not its attempts; the task fails for good at the 10th abandon only.

COMMIT TRANSACTION;

-- Since version 13 the procedures this version created or altered are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/sqlserver (see migrations/sqlserver/000013_routines_apart.up.sql).
