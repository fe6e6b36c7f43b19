-- Version 8 (issue 10, items 3 and 4) on SQL Server: what PostgreSQL and SQLite
-- got in version 3. 000003 already widened the CHECK constraints
-- (CK_Processes_state: 'cancelled'; CK_Logs_outcome: 'cancelled', 'discarded',
-- 'retried'); this version makes the dialect write them:
--
-- * stageq.OpenStage gains @EndState, the state a process ends in when no task
--   is left: 'succeeded' (the default: every caller of version 7 is unchanged) or
--   'cancelled', which the operator's batches (dialect/sqlserver/operate.go,
--   processOpSQL and taskOpSQL) pass when their discard or cancel removed at
--   least one task. So a process that an operator emptied ends 'cancelled' in the
--   same UPDATE that would have ended it 'succeeded'; one that still holds a
--   failed task stays 'failed'; one that gets new tasks is made 'active' again by
--   the same procedure (its last UPDATE, unchanged).
-- * The audit rows themselves (one Logs row per task an operator's cancel,
--   discard or retry changes, worker_id naming who) are written by those Go
--   batches from the OUTPUT of their own UPDATE / DELETE: exactly the rows
--   changed, 1,000 per statement. Nothing in the schema changes for them.
--
-- Written from Microsoft's documentation; NOT RUN AGAINST A SQL SERVER (none
-- here). As in version 2: one batch, no GO, the procedure altered inside EXEC
-- (N'...') with quotes doubled, ANSI_NULLS and QUOTED_IDENTIFIER pinned ON
-- because a procedure keeps the settings of its creation (the filtered indexes
-- need them), ALTER PROCEDURE so that its permissions stay.
-- https://learn.microsoft.com/sql/t-sql/statements/alter-procedure-transact-sql
-- https://learn.microsoft.com/sql/t-sql/statements/create-procedure-transact-sql (parameter defaults)
-- https://learn.microsoft.com/sql/t-sql/language-elements/throw-transact-sql
-- https://learn.microsoft.com/sql/t-sql/statements/set-quoted-identifier-transact-sql

SET XACT_ABORT ON;
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;

BEGIN TRANSACTION;

-- stageq.OpenStage as version 2 defined it, plus @EndState (above). THROW
-- 50007 (stageq's bad-input range, 50000-50999) refuses any other end state.

COMMIT TRANSACTION;

-- Since version 13 the procedures this version created or altered are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/sqlserver (see migrations/sqlserver/000013_routines_apart.up.sql).
