package sqlserver

import (
	"context"
	"time"

	"github.com/stageq/stageq/dialect"
)

var _ dialect.Pruner = (*SQLServer)(nil)

// Retention (dialect.Pruner), as on PostgreSQL and SQLite: every worker prunes,
// with no leader. Written from Microsoft's documentation, NOT RUN AGAINST A REAL
// SQL SERVER (docs/sqlserver.md, "Retention").
//
// Each statement below deletes at most @Batch rows (1..1000; Go sends larger
// batches as several statements) in one short transaction of its own, so a
// statement holds at most about a thousand row locks on any one index: far below
// the 5,000 locks on one index at which SQL Server attempts lock escalation, which
// READPAST could not pass. Rows another session holds are skipped (READPAST, with
// READCOMMITTEDLOCK so that it is allowed under READ_COMMITTED_SNAPSHOT), so two
// pruners never wait for each other: each takes the rows the other left. Every
// batch also runs with
//
//   - SET DEADLOCK_PRIORITY LOW: should a pruner ever deadlock with the queue (a
//     submission reusing the name of a process being deleted locks the name's
//     UQ_Processes_name key first, the pruner the clustered row first), the pruner
//     is the victim, and its batch is retried (error 1205);
//   - SET LOCK_TIMEOUT 1000: the waits left (an index key held by a short queue
//     transaction, a locking read of Tasks) end after a second with error 1222, the
//     transaction rolled back (XACT_ABORT ON) and the batch retried with backoff,
//     so a pruner never keeps the rows it has locked for long.
//
// SET options inside an sp_executesql batch are restored when the batch ends, so
// none of them leaks into the pooled session.
//
// The cut-off is the database's now minus the age: DATEADD takes an int, so the
// age is applied as whole seconds plus the remaining milliseconds (Go caps the age
// at pruneMaxAge).
//
// https://learn.microsoft.com/sql/t-sql/statements/delete-transact-sql (TOP with
// ORDER BY belongs in a subselect; FROM with table hints)
// https://learn.microsoft.com/sql/t-sql/queries/hints-transact-sql-table (READPAST
// in UPDATE and DELETE, READ COMMITTED only, with READCOMMITTEDLOCK under
// READ_COMMITTED_SNAPSHOT; UPDLOCK held to the end of the transaction; FORCESEEK)
// https://learn.microsoft.com/sql/relational-databases/sql-server-transaction-locking-and-row-versioning-guide#lock-escalation
// https://learn.microsoft.com/sql/t-sql/statements/set-deadlock-priority-transact-sql
// https://learn.microsoft.com/sql/t-sql/statements/set-lock-timeout-transact-sql
// https://learn.microsoft.com/sql/t-sql/statements/set-statements-transact-sql
// https://learn.microsoft.com/sql/t-sql/statements/set-xact-abort-transact-sql
// https://learn.microsoft.com/sql/t-sql/functions/dateadd-transact-sql
// https://learn.microsoft.com/sql/t-sql/functions/rowcount-transact-sql

// prunePrologue begins every prune statement: the session settings of the
// header above, the checked arguments (age in milliseconds, batch size) and
// @Cutoff, the database's now minus the age. It declares @Deleted, which each
// statement sets and returns.
const prunePrologue = `
SET NOCOUNT ON;
SET XACT_ABORT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET DEADLOCK_PRIORITY LOW;
SET LOCK_TIMEOUT 1000;
DECLARE @AgeMs bigint = @pAgeMs,
        @Batch int = @pBatch,
        @Deleted int = 0;
IF @Batch < 1 OR @Batch > 1000 OR @AgeMs < 1 OR @AgeMs / 1000 > 2147483647
    THROW 50007, N'stageq: a prune batch is 1 to 1000 rows, its age 1 ms to 68 years', 1;
DECLARE @Cutoff datetime2(7) = DATEADD(millisecond, -CONVERT(int, @AgeMs % 1000),
                                       DATEADD(second, -CONVERT(int, @AgeMs / 1000), SYSUTCDATETIME()));`

// pruneDeleteGone ends the two-step prunes (workers, processes) after their
// DELETE of the rows in @Gone: it commits and answers the count.
const pruneDeleteGone = `
    SET @Deleted = @@ROWCOUNT;
    COMMIT TRANSACTION;
END;
SELECT @Deleted;`

// pruneLogsSQL deletes up to @Batch Logs rows of attempts that started before the
// cut-off and are not running, oldest first. In: age in milliseconds, batch size
// (1..1000). Out: rows deleted.
//
// Locks: the subselect seeks IX_Logs_Started up to the cut-off and takes an update
// lock on each row it returns (its IX_Logs_Started key and, through the key
// lookup for outcome, its clustered key), skipping rows held elsewhere; the DELETE
// reaches those rows by clustered key (FORCESEEK) and removes them from the four
// indexes of Logs. Old rows are touched by nobody else; the waits left are index
// keys of recent rows next to them, bounded by LOCK_TIMEOUT.
const pruneLogsSQL = prunePrologue + `
BEGIN TRANSACTION;
DELETE l
  FROM stageq.Logs AS l WITH (ROWLOCK, FORCESEEK)
 WHERE l.id IN (SELECT TOP (@Batch) o.id
                  FROM stageq.Logs AS o WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK, INDEX(IX_Logs_Started))
                 WHERE o.started_at < @Cutoff AND o.outcome <> 'running'
                 ORDER BY o.started_at);
SET @Deleted = @@ROWCOUNT;
COMMIT TRANSACTION;
SELECT @Deleted;`

// pruneWorkersSQL deletes up to @Batch Workers rows whose last heartbeat (or
// stop) is older than the cut-off and that hold no running task. In: age in
// milliseconds, batch size (1..1000). Out: rows deleted.
//
// Workers has no index on its times (it holds one row per worker process, a few
// thousand at most), so the candidates are found by a scan that keeps no lock
// (READPAST, READCOMMITTEDLOCK: shared locks released row by row, held rows
// skipped) into @Cand. Then, in one short transaction, each candidate is taken
// by clustered key with an update lock (READPAST: a worker registering or beating
// right now is left alone), re-checked, and deleted. "No running task" is a
// locking read of IX_Tasks_Running (waits only for a claim or completion in
// flight). As on PostgreSQL, a claim does not lock the worker's row; a worker
// silent for the whole retention does not claim.
const pruneWorkersSQL = prunePrologue + `
-- A table variable's columns take the database's collation unless told: the ids
-- compare with Workers.id, so they carry its binary collation.
DECLARE @Cand TABLE (id nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY);
DECLARE @Gone TABLE (id nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY);
INSERT INTO @Cand (id)
SELECT TOP (@Batch) w.id
  FROM stageq.Workers AS w WITH (READPAST, READCOMMITTEDLOCK)
 WHERE COALESCE(w.stopped_at, w.heartbeat_at) < @Cutoff
   AND NOT EXISTS (SELECT 1 FROM stageq.Tasks AS t WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Tasks_Running))
                    WHERE t.worker_id = w.id AND t.state = 'running')
 ORDER BY COALESCE(w.stopped_at, w.heartbeat_at), w.id;
IF @@ROWCOUNT > 0
BEGIN
    BEGIN TRANSACTION;
    INSERT INTO @Gone (id)
    SELECT w.id
      FROM @Cand AS c
      JOIN stageq.Workers AS w WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK, FORCESEEK) ON w.id = c.id
     WHERE COALESCE(w.stopped_at, w.heartbeat_at) < @Cutoff
       AND NOT EXISTS (SELECT 1 FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Running))
                        WHERE t.worker_id = w.id AND t.state = 'running');
    DELETE w
      FROM stageq.Workers AS w WITH (ROWLOCK, FORCESEEK)
      JOIN @Gone AS g ON g.id = w.id;` + pruneDeleteGone

// pruneProcessesSQL deletes up to @Batch processes that finished (succeeded or
// cancelled) before the cut-off and have no task left, never "default". In: age
// in milliseconds, batch size (1..1000). Out: rows deleted.
//
// Processes has no index on finished_at (docs/sqlserver.md, "Retention"), so the
// candidates are found by a scan of PK_Processes that keeps no lock (READPAST,
// READCOMMITTEDLOCK), oldest first, into @Cand. Then, in one short transaction,
// each candidate's row is taken by clustered key with an update lock (READPAST: a
// process that a submission, an operator or the stage machinery holds is left for
// a later pass), re-checked, and deleted. Only stageq.Submit adds tasks to a
// process, and it holds the process row's update lock (PK_Processes) before it
// inserts them, so a process found without tasks under that lock stays without
// them until the deletion commits; "no task" is a locking read of IX_Tasks_Stage,
// the index the foreign key FK_Tasks_Processes is checked through. A submission
// that has already locked the name's UQ_Processes_name key makes the DELETE wait
// for that key (the deadlock the header describes, ended by LOCK_TIMEOUT or the
// deadlock monitor, the pruner rolled back either way). Logs and
// ScheduleRuns keep their rows of a deleted process (no foreign key), as on
// PostgreSQL.
const pruneProcessesSQL = prunePrologue + `
DECLARE @Cand TABLE (id bigint NOT NULL PRIMARY KEY);
DECLARE @Gone TABLE (id bigint NOT NULL PRIMARY KEY);
INSERT INTO @Cand (id)
SELECT TOP (@Batch) p.id
  FROM stageq.Processes AS p WITH (READPAST, READCOMMITTEDLOCK)
 WHERE p.finished_at < @Cutoff AND p.state IN ('succeeded', 'cancelled') AND p.name <> N'default'
   AND NOT EXISTS (SELECT 1 FROM stageq.Tasks AS t WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Tasks_Stage))
                    WHERE t.process_id = p.id)
 ORDER BY p.finished_at, p.id;
IF @@ROWCOUNT > 0
BEGIN
    BEGIN TRANSACTION;
    INSERT INTO @Gone (id)
    SELECT p.id
      FROM @Cand AS c
      JOIN stageq.Processes AS p WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK, FORCESEEK) ON p.id = c.id
     WHERE p.finished_at < @Cutoff AND p.state IN ('succeeded', 'cancelled') AND p.name <> N'default'
       AND NOT EXISTS (SELECT 1 FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Stage))
                        WHERE t.process_id = p.id);
    DELETE p
      FROM stageq.Processes AS p WITH (ROWLOCK, FORCESEEK)
      JOIN @Gone AS g ON g.id = p.id;` + pruneDeleteGone

// pruneRecordSQL stores the latest pass in the single row of stageq.PruneStatus
// (id 1). In: worker id, rows deleted per kind, retention per kind in seconds.
// Out: nothing.
//
// The upsert of workerRegisterSQL: UPDATE with UPDLOCK + SERIALIZABLE on the key
// (a key-range lock while the row does not exist yet), then INSERT if nothing was
// updated, in one transaction, so two workers recording their first pass at once
// queue up instead of both inserting (error 2627).
const pruneRecordSQL = `
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @WorkerId nvarchar(200) = @pWorkerId,
        @LogsDeleted bigint = @pLogsDeleted,
        @WorkersDeleted bigint = @pWorkersDeleted,
        @ProcessesDeleted bigint = @pProcessesDeleted,
        @RetainLogsS bigint = @pRetainLogsS,
        @RetainWorkersS bigint = @pRetainWorkersS,
        @RetainProcessesS bigint = @pRetainProcessesS;
BEGIN TRANSACTION;
UPDATE s
   SET worker_id = @WorkerId, ran_at = SYSUTCDATETIME(), logs_deleted = @LogsDeleted,
       workers_deleted = @WorkersDeleted, processes_deleted = @ProcessesDeleted,
       retain_logs_s = @RetainLogsS, retain_workers_s = @RetainWorkersS, retain_processes_s = @RetainProcessesS
  FROM stageq.PruneStatus AS s WITH (UPDLOCK, SERIALIZABLE, ROWLOCK)
 WHERE s.id = 1;
IF @@ROWCOUNT = 0
    INSERT INTO stageq.PruneStatus (id, worker_id, ran_at, logs_deleted, workers_deleted, processes_deleted,
                                    retain_logs_s, retain_workers_s, retain_processes_s)
    VALUES (1, @WorkerId, SYSUTCDATETIME(), @LogsDeleted, @WorkersDeleted, @ProcessesDeleted,
            @RetainLogsS, @RetainWorkersS, @RetainProcessesS);
COMMIT TRANSACTION;`

// pruneLastSQL reads the latest pass. No parameters. A plain READ COMMITTED read
// of one row, for `queuectl status`.
const pruneLastSQL = `
SET NOCOUNT ON;
SELECT s.worker_id, s.ran_at, s.logs_deleted, s.workers_deleted, s.processes_deleted,
       s.retain_logs_s, s.retain_workers_s, s.retain_processes_s
  FROM stageq.PruneStatus AS s
 WHERE s.id = 1;`

// pruneChunk is the most rows one prune statement deletes (the statements refuse
// more; sqlbase sends a larger batch as several statements): about one lock per
// row on each index of the table, a factor five below the 5,000 locks on one
// index that trigger lock escalation.
const pruneChunk = 1000

// pruneMaxAge is the longest retention the cut-off arithmetic takes (DATEADD adds
// an int of seconds: about 68 years). A longer one is applied as this, which keeps
// every row the database can have written anyway.
const pruneMaxAge = (1<<31 - 1) * time.Second

// pruneAge is a retention age as the prune statements take it: whole
// milliseconds, at most pruneMaxAge.
func pruneAge(_ context.Context, age time.Duration) (any, error) {
	return millis(min(age, pruneMaxAge)), nil
}
