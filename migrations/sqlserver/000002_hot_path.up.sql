-- stageq 2 for SQL Server: the hot path without a hot row, the same design as
-- migrations/postgres/000002_hot_path.up.sql, in T-SQL written from Microsoft's
-- documentation (cited per statement). This file replaces a placeholder
-- (SELECT 1;) that landed on 2026-11-23; no SQL Server database was ever deployed
-- at version 2 with it, so no database needs the placeholder's version upgraded.
-- NOT RUN AGAINST A REAL SQL SERVER: see docs/sqlserver.md for what ran where.
--
-- Version 1 locked the process row in every claim (to advance its stride pass)
-- and in every completion (to re-derive its stage), and held it until commit:
-- one process drained one transaction at a time. Here no claim and no successful
-- completion locks a shared row:
--
-- * Fairness is decided when a task becomes available, not when it is claimed
--   (weighted fair queuing, start tags): a process with weight w has its tasks
--   stamped base, base + s, base + 2s, ... with s = 1,000,000 / w, from the later
--   of the current virtual time of its priority and the end of its own backlog
--   (Processes.vtail). A claim takes the available tasks with the highest process
--   priority (copied onto the task, Tasks.process_priority) and the lowest virtual
--   time, in one UPDATE per priority level with UPDLOCK, READPAST, ROWLOCK,
--   READCOMMITTEDLOCK. The virtual clock is a sequence (stageq.VClock): advancing
--   it takes no row lock and is not rolled back.
-- * A successful completion (stageq.FinishMany) deletes its task and closes its
--   Logs row, and nothing else. Whether it ended its stage is decided after it
--   committed (stageq.Advance): whoever commits the last task of a stage sees none
--   left, locks the process row once (READPAST: busy rows are reported back) and
--   opens the next stage. A crash in between is repaired by stageq.Rescue.
-- * Tasks whose run_at lies ahead wait as 'scheduled' (IX_Tasks_Due) and are made
--   available by the claim once due, so IX_Tasks_Claim holds only tasks that may
--   start now.
-- * Limits (stageq.Limits, Processes.max_parallel) keep their locks: a limit row
--   is where concurrent claims must agree. The claim takes the lock-free path
--   whenever no limit row and no capped process exists.
--
-- Filtered indexes (SQL Server's partial indexes) hold only the rows a statement
-- seeks: DML on their table needs ANSI_NULLS, ANSI_PADDING, ANSI_WARNINGS,
-- ARITHABORT, CONCAT_NULL_YIELDS_NULL and QUOTED_IDENTIFIER ON and
-- NUMERIC_ROUNDABORT OFF. ODBC, OLE DB, SqlClient and go-mssqldb sessions (it logs
-- in with the ODBC flag) have those, ARITHABORT implied by ANSI_WARNINGS at
-- compatibility level 90 and above; procedures keep the ANSI_NULLS and
-- QUOTED_IDENTIFIER of their creation, pinned ON below. A DB-Library-era client
-- with other defaults gets error 1934 instead of silently wrong data.
-- https://learn.microsoft.com/sql/relational-databases/indexes/create-filtered-indexes
-- https://learn.microsoft.com/sql/t-sql/statements/set-arithabort-transact-sql
--
-- How this file is run: one batch, as 000001. Statements that name a column added
-- here run in a dynamic batch of their own, EXEC (N'...'), because a batch is
-- compiled before its ALTER TABLE runs; procedures are created the same way,
-- with ALTER PROCEDURE for those of version 1 (their permissions stay) and CREATE
-- PROCEDURE for the new ones: a database that is not at version 1 fails loudly
-- instead of being half converted. One transaction: a failure leaves version 1
-- as it was.
-- https://learn.microsoft.com/sql/t-sql/statements/create-procedure-transact-sql
-- https://learn.microsoft.com/sql/t-sql/statements/create-sequence-transact-sql

SET XACT_ABORT ON;
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;

BEGIN TRANSACTION;

-- The queue's virtual clock: at least the newest virtual time stamped on a task;
-- the current virtual time of a priority with nothing available. Cached values
-- lost at a restart only move it forward.
CREATE SEQUENCE stageq.VClock AS bigint START WITH 0 INCREMENT BY 1 MINVALUE 0 NO CYCLE CACHE 50;

-- Processes: the run queue's columns go; vtail is the virtual time after its
-- last stamped task.
DROP INDEX IX_Processes_Queue ON stageq.Processes;
DROP INDEX IX_Processes_VTime ON stageq.Processes;
-- A column with a DEFAULT constraint cannot be dropped before it. IF EXISTS
-- (2016+): an engine that keeps no named defaults (Babelfish) has none to drop.
ALTER TABLE stageq.Processes DROP CONSTRAINT IF EXISTS DF_Processes_pass;
ALTER TABLE stageq.Processes DROP CONSTRAINT IF EXISTS DF_Processes_runnable;
ALTER TABLE stageq.Processes DROP COLUMN pass;
ALTER TABLE stageq.Processes DROP COLUMN runnable;
ALTER TABLE stageq.Processes DROP COLUMN ready_at;
ALTER TABLE stageq.Processes ADD vtail bigint NOT NULL CONSTRAINT DF_Processes_vtail DEFAULT (0);
-- The few processes with a concurrency cap (the claim asks whether any exists),
-- and the unfinished ones (the rescue pass looks for stages left behind).
CREATE NONCLUSTERED INDEX IX_Processes_Capped ON stageq.Processes (id) WHERE max_parallel IS NOT NULL;
CREATE NONCLUSTERED INDEX IX_Processes_Open ON stageq.Processes (id) WHERE state IN ('active', 'failed');

-- Tasks: a virtual time, the process's priority copied so that the claim is one
-- index seek, and the 'scheduled' state.
ALTER TABLE stageq.Tasks ADD vtime bigint NOT NULL CONSTRAINT DF_Tasks_vtime DEFAULT (0);
ALTER TABLE stageq.Tasks ADD process_priority int NOT NULL CONSTRAINT DF_Tasks_process_priority DEFAULT (0);
ALTER TABLE stageq.Tasks DROP CONSTRAINT CK_Tasks_state;
-- A new constraint is checked against the existing rows by default (WITH CHECK).
-- https://learn.microsoft.com/sql/t-sql/statements/alter-table-transact-sql
ALTER TABLE stageq.Tasks ADD CONSTRAINT CK_Tasks_state
    CHECK (state IN ('blocked', 'scheduled', 'available', 'running', 'failed'));

-- Fewer indexes per state change. A claim moves a row from IX_Tasks_Claim to
-- IX_Tasks_Running and IX_Tasks_RunningLimit; a
-- successful completion deletes it from those and from IX_Tasks_Stage, the one
-- index of every task by process (the barrier, and the foreign key's check).
-- Lease extension changes lease_expires_at, which no index holds.
DROP INDEX IX_Tasks_ClaimProcess ON stageq.Tasks;
DROP INDEX IX_Tasks_Ready ON stageq.Tasks;
DROP INDEX IX_Tasks_Lease ON stageq.Tasks;
DROP INDEX IX_Tasks_Worker ON stageq.Tasks;
DROP INDEX IX_Tasks_RunningLimit ON stageq.Tasks;
DROP INDEX IX_Tasks_RunningKind ON stageq.Tasks;
EXEC (N'CREATE NONCLUSTERED INDEX IX_Tasks_Claim ON stageq.Tasks (process_priority DESC, vtime, id) WHERE state = ''available'';');
CREATE NONCLUSTERED INDEX IX_Tasks_Due ON stageq.Tasks (run_at) WHERE state = 'scheduled';
CREATE NONCLUSTERED INDEX IX_Tasks_Blocked ON stageq.Tasks (process_id, execution_order) WHERE state = 'blocked';
CREATE NONCLUSTERED INDEX IX_Tasks_Failed ON stageq.Tasks (process_id) WHERE state = 'failed';
-- Running tasks, by process: max_parallel counts them; rescue, kind limits and
-- worker listings read them all, which is bounded by the cluster's concurrency.
-- kind and worker_id never change while a task runs, so including them costs no
-- write that the claim does not already make.
CREATE NONCLUSTERED INDEX IX_Tasks_Running ON stageq.Tasks (process_id) INCLUDE (kind, worker_id) WHERE state = 'running';
-- Filtered on state alone: a hinted index must be matched by the query's own
-- predicate, and 'limit_key = @Key' is not 'limit_key IS NOT NULL' as written.
CREATE NONCLUSTERED INDEX IX_Tasks_RunningLimit ON stageq.Tasks (limit_key) WHERE state = 'running';

-- Logs: the claim inserts a row per attempt; a schedule's index holds only the
-- rows a schedule enqueued.
DROP INDEX IX_Logs_Schedule ON stageq.Logs;
CREATE NONCLUSTERED INDEX IX_Logs_Schedule ON stageq.Logs (schedule_name, scheduled_for) WHERE schedule_name IS NOT NULL;

-- Replaced by stageq.OpenStage's own checks and the virtual times.

-- stageq.VNow: the current virtual time of priority @Priority: the virtual time
-- of the next task a claim would take at that priority, or the clock when none
-- is available. The head is read with READPAST: a task another claim is taking
-- right now is no longer the head. The clock is read with NEXT VALUE FOR, which
-- also moves it on by one (a thousandth of the smallest stride; harmless), and
-- NEXT VALUE FOR cannot appear inside COALESCE or CASE, hence the IF.
-- https://learn.microsoft.com/sql/t-sql/functions/next-value-for-transact-sql

-- stageq.StampDone records that a process's tasks were stamped up to @VTail:
-- its vtail, and the clock, which must never be behind the newest stamp. The
-- caller holds the process row. A sequence only moves forward by handing out
-- values, so the clock is raised by taking a range of the missing size with
-- sys.sp_sequence_get_range (no row lock, not rolled back: the clock never goes
-- back, and two sessions raising it at once only overshoot, which delays a
-- newcomer by at most one of their strides).
-- https://learn.microsoft.com/sql/relational-databases/system-stored-procedures/sp-sequence-get-range-transact-sql

-- stageq.OpenStage re-derives which tasks of a process may run: the blocked
-- tasks of its lowest order become available (or scheduled, when their run_at
-- lies ahead), stamped with their virtual times in their own priority order;
-- a stage that was open above a lower order that arrived, or of a paused
-- process, is blocked again. The caller holds the process row's update lock
-- (Submit, AdvanceProcess, Rescue, the operator's commands). Every statement is
-- a seek on IX_Tasks_Stage or IX_Tasks_Blocked; when nothing changes, that is
-- two seeks and no write.
--
-- Writes go 1,000 tasks per statement: SQL Server attempts to escalate to a
-- table lock once one statement holds 5,000 locks on one index, and READPAST
-- passes over locked rows, never over a locked table. The order in which a
-- stage's tasks take their turns is fixed once, in @Open (identity values follow
-- INSERT ... SELECT ... ORDER BY), so each chunk continues the numbering.
-- https://learn.microsoft.com/sql/relational-databases/sql-server-transaction-locking-and-row-versioning-guide#lock-escalation
-- https://learn.microsoft.com/sql/t-sql/statements/insert-transact-sql

-- stageq.Configure changes a process's scheduling; the caller holds its row.
-- @Priority, @Weight, @MaxParallel are NULL to keep them; @MaxParallel 0 removes
-- the cap. A new priority reaches the tasks already waiting (the claim orders by
-- their copy of it, process_priority); a new weight re-spaces the turns of the
-- tasks already stamped, from the earliest of them, so that a plan's weight
-- applies to its own tasks. 1,000 tasks per statement (lock escalation).

-- stageq.Submit: as in migration 1 (validation, the process row locked first,
-- tasks inserted 1,000 per statement), except that every task arrives blocked
-- and OpenStage opens the lowest stage with its virtual times, and that the
-- scheduling settings go through stageq.Configure.

-- stageq.Claim leases up to @Max tasks (at most 1,000) to @WorkerId with lease
-- token @Token for @LeaseMs, writes their Logs rows and returns them, in one
-- transaction. It locks no shared row on its fast path.
--
-- 1. Scheduled tasks that are due (at most 1,000) become available, stamped from
--    the current virtual time of their priority: a process's delayed tasks take
--    turns with the others instead of arriving as a burst.
-- 2. No limit row and no capped process: each priority level is served by ONE
--    statement, an UPDATE of the head of IX_Tasks_Claim (process priority, then
--    virtual time) read with UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK and
--    written through OUTPUT into @Claimed. TOP with ORDER BY sits in the CTE that
--    the UPDATE targets, because UPDATE TOP (n) alone takes arbitrary rows
--    ("UPDATE (Transact-SQL)", Limiting Updated Data by Using TOP). Rows that
--    other claims hold are passed over, never waited for; the lock that reads a
--    row is the lock that updates it, so two claims can never take one row.
--    A lower priority is served only when the higher one has nothing this claim
--    could take (rows another claim holds are that claim's).
-- 3. Otherwise the gated path: candidates in claim order, each locked alone and
--    admitted when its capped process's row and each limit row that applies can be
--    locked (READPAST: held elsewhere counts as full) and their running tasks,
--    counted after the lock, leave a slot. A candidate that is refused loses its
--    turn (its virtual time goes behind the current one); further candidates of a
--    full process, limit or kind are skipped in this claim.
--
-- Lock order: process row, then limit rows, then task rows; this claim takes
-- process and limit rows only with READPAST, so it never waits while it holds a
-- task lock. READ COMMITTED plus READCOMMITTEDLOCK keep READPAST legal and the
-- reads locking on databases with READ_COMMITTED_SNAPSHOT on. At most about four
-- locks per task per statement (clustered row, IX_Tasks_Claim, IX_Tasks_Running,
-- IX_Tasks_RunningLimit), under 4,000 at 1,000 tasks: below lock escalation.
-- https://learn.microsoft.com/sql/t-sql/queries/hints-transact-sql-table
-- https://learn.microsoft.com/sql/t-sql/queries/update-transact-sql
-- https://learn.microsoft.com/sql/t-sql/queries/output-clause-transact-sql

-- stageq.FinishMany ends many attempts in one transaction. @Results is a JSON
-- array (at most 1,000) of {"id": task id, "token": lease token, "outcome":
-- "succeeded" | "failed" | "released", "error": text, "retry_ms": ms}; with
-- "failed", retry_ms > 0 schedules another attempt and 0 fails the task for good.
-- Each result is fenced by its token: one whose token no longer holds its task
-- changes nothing. Returns, unless @ResultSet = 0, a row (task_id, NULL) per
-- attempt recorded and a row (NULL, advance_process_id) per process whose
-- current stage this batch may have ended: the caller passes those to
-- stageq.Advance after this transaction committed. @Held: attempts recorded.
--
-- Succeeded tasks are deleted and their Logs rows closed, and nothing else: no
-- process row is locked or read with a lock that waits (the hot path). Tasks
-- handed back (a retry, a release) or failed for good lock their process rows
-- first, one statement per row in id order as every writer does, so that a
-- lower order submitted meanwhile cannot be missed and a final failure marks
-- its process failed in the same transaction. Those are the exceptions.
--
-- Whether a stage may have ended is read past held rows (READPAST): a task of
-- the stage that another transaction holds is being claimed or finished there,
-- so skipping it can only add a process to the answer, never leave one out, and
-- stageq.Advance decides again under the process lock. Whoever commits the last
-- task of a stage then sees it empty: of two completions racing for a stage's
-- last two tasks, the one that commits last sees none left.
-- https://learn.microsoft.com/sql/t-sql/functions/openjson-transact-sql
-- https://learn.microsoft.com/sql/t-sql/queries/output-clause-transact-sql

-- stageq.Finish ends one attempt, as stageq.FinishMany ends many, in the
-- caller's transaction when there is one (an atomic task finishes in the
-- transaction that ran its body). @Held = 0, with nothing changed, when the token
-- no longer holds the task. It does not move the process to its next stage: the
-- caller passes the task's process to stageq.Advance once it has committed.

-- stageq.AdvanceProcess is the second half of a completion, run after it
-- committed: if the process's current stage has no task left (or it has a task
-- failed for good and does not say so yet), OpenStage re-derives its stage under
-- the process lock, in a short transaction. Idempotent. It never waits for a
-- lock: SET LOCK_TIMEOUT 0 turns every wait into error 1222, caught here.
--
-- * The process row held elsewhere (a submission still open, say): @Busy = 1,
--   for the caller to try again shortly.
-- * A task of the stage held elsewhere: a claim is taking it, or a completion
--   deleting it has not committed yet. Either way the stage is not over for this
--   caller, and that completion advances the process after its own commit: of two
--   completions racing for a stage's last two tasks, the one that commits last
--   finds the stage empty. Nothing to do, not busy.
-- The two checks run before the transaction (XACT_ABORT ON dooms a transaction on
-- error 1222, but outside one only the statement fails), so this procedure must
-- be called outside a transaction.
-- https://learn.microsoft.com/sql/t-sql/statements/set-lock-timeout-transact-sql
-- https://learn.microsoft.com/sql/t-sql/language-elements/try-catch-transact-sql

-- stageq.Advance runs stageq.AdvanceProcess for each process id of @Ids (a JSON
-- array of numbers), in id order, and returns the ids whose row another
-- transaction held (one column, id), to try again shortly.

-- stageq.Rescue returns up to @Max tasks whose lease expired to the queue, or
-- fails them when they are out of attempts, and closes their Logs rows as
-- abandoned; then it repairs up to @Max processes whose stage ended without being
-- advanced (a worker died between a completion and its stageq.Advance). Each
-- task, and each repair, is a transaction of its own: a pass holds one process
-- lock at a time and a handful of row locks, far below lock escalation. Process
-- rows are taken with READPAST: a process busy elsewhere is rescued by a later
-- pass, and a rescue never waits for one.

COMMIT TRANSACTION;

-- Since version 13 the procedures this version created or altered are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/sqlserver (see migrations/sqlserver/000013_routines_apart.up.sql).
