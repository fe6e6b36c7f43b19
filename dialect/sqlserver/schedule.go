package sqlserver

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// Schedules (dialect.Scheduler). A worker locks a due schedule row with UPDLOCK +
// READPAST in its transaction (racing workers pass over it), enqueues the tick
// with Submit and records it with ScheduleFire in the same transaction; the
// next_run predicate of the advance and the primary key of ScheduleRuns are two
// more fences behind the row lock. Every time decision uses SYSUTCDATETIME().

// scheduleCreateSQL inserts a schedule. In: name, cron (NULL, sent as empty, for
// an interval), interval ms (NULL, sent as 0, for cron), plan JSON, missed
// policy, grace ms, singleton, paused, first next_run. Out: the id. A duplicate
// name is error 2627 (ErrExists).
const scheduleCreateSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(200) = @pName,
        @Cron nvarchar(200) = @pCron,
        @IntervalMs bigint = @pIntervalMs,
        @Plan nvarchar(max) = @pPlan,
        @Missed varchar(10) = @pMissed,
        @GraceMs bigint = @pGraceMs,
        @Singleton bit = @pSingleton,
        @Paused bit = @pPaused,
        @NextRun datetime2(7) = @pNextRun;
INSERT INTO stageq.Schedules (name, cron, interval_ms, [plan], missed, grace_ms, singleton, paused, next_run)
OUTPUT inserted.id
VALUES (@Name, NULLIF(@Cron, N''), NULLIF(@IntervalMs, 0), @Plan, @Missed, @GraceMs, @Singleton, @Paused, @NextRun);`

// ScheduleCreate implements dialect.Scheduler (sqlbase, after refusing what
// the columns cannot hold: the statement's sized locals would cut it).
func (d *SQLServer) ScheduleCreate(ctx context.Context, tx *sql.Tx, sp dialect.ScheduleCreateParams) (int64, error) {
	for _, c := range []struct {
		field, v string
		n        int
	}{{"schedule name", sp.Name, maxName}, {"cron", sp.Cron, maxName}, {"missed policy", sp.Missed, 10}} {
		if err := checkLen(c.field, c.v, c.n); err != nil {
			return 0, fmt.Errorf("create schedule %q: %w", sp.Name, err)
		}
	}
	return d.Base.ScheduleCreate(ctx, tx, sp)
}

// scheduleListSQL reads schedules by name. In: name (empty for all). Out: schedules.
const scheduleListSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(400) = @pName;
SELECT s.id, s.name, COALESCE(s.cron, N''), COALESCE(s.interval_ms, 0), s.[plan], s.missed, s.grace_ms,
       s.singleton, s.paused, s.next_run, s.last_run, COALESCE(s.last_outcome, ''),
       COALESCE(s.last_worker_id, N''), s.last_fired_at
  FROM stageq.Schedules AS s
 WHERE (@Name = N'' OR s.name = @Name)
 ORDER BY s.name
OPTION (RECOMPILE);`

// The schedule statements sqlbase runs (base.go). A name is looked up in an nvarchar(400) local, so a
// name longer than any schedule's is not cut into another's and matches none.

// schedulePauseSQL pauses or resumes a schedule. In: name, paused. Out: rows
// changed.
const schedulePauseSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(400) = @pName,
        @Paused bit = @pPaused;
UPDATE stageq.Schedules SET paused = @Paused, updated_at = SYSUTCDATETIME() WHERE name = @Name;
SELECT @@ROWCOUNT;`

// scheduleDeleteSQL removes a schedule and its run history. The history goes
// first, 1,000 rows per statement, so that no single statement takes enough row
// locks to escalate to a table lock; then the schedule row. In: name. Out: 1 when
// the schedule existed.
const scheduleDeleteSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(400) = @pName,
        @Id bigint,
        @Deleted int = 0;
SELECT @Id = s.id FROM stageq.Schedules AS s WHERE s.name = @Name;
IF @Id IS NOT NULL
BEGIN
    WHILE 1 = 1
    BEGIN
        DELETE TOP (1000) FROM stageq.ScheduleRuns WHERE schedule_id = @Id;
        IF @@ROWCOUNT < 1000 BREAK;
    END;
    DELETE FROM stageq.Schedules WHERE id = @Id;
    SET @Deleted = @@ROWCOUNT;
END;
SELECT @Deleted;`

// scheduleLockDueSQL locks, in the caller's transaction, the earliest due
// schedule no one else holds: UPDLOCK keeps the row until the transaction ends,
// READPAST passes over rows other workers hold, READCOMMITTEDLOCK keeps READPAST
// legal and locking under READ_COMMITTED_SNAPSHOT. A row another worker advanced
// and committed meanwhile is re-read and drops out on next_run. Out: the schedule
// and the database's now. No parameters.
const scheduleLockDueSQL = `
SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SELECT TOP (1) s.id, s.name, COALESCE(s.cron, N''), COALESCE(s.interval_ms, 0), s.[plan], s.missed, s.grace_ms,
       s.singleton, s.paused, s.next_run, s.last_run, COALESCE(s.last_outcome, ''),
       COALESCE(s.last_worker_id, N''), s.last_fired_at, SYSUTCDATETIME()
  FROM stageq.Schedules AS s WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK, INDEX(IX_Schedules_Due))
 WHERE s.paused = 0 AND s.next_run <= SYSUTCDATETIME()
 ORDER BY s.next_run;`

// scheduleLockSQL locks the named schedule in the caller's transaction, waiting
// for other holders. In: name. Out: the schedule and the database's now.
const scheduleLockSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(400) = @pName;
SELECT s.id, s.name, COALESCE(s.cron, N''), COALESCE(s.interval_ms, 0), s.[plan], s.missed, s.grace_ms,
       s.singleton, s.paused, s.next_run, s.last_run, COALESCE(s.last_outcome, ''),
       COALESCE(s.last_worker_id, N''), s.last_fired_at, SYSUTCDATETIME()
  FROM stageq.Schedules AS s WITH (UPDLOCK, ROWLOCK)
 WHERE s.name = @Name;`

// scheduleUnfinishedSQL says whether a task of the schedule is still queued. In:
// schedule name. Out: 1 or 0. A seek on IX_Tasks_Schedule, whose keys no claim or
// lease extension changes.
const scheduleUnfinishedSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(400) = @pName;
SELECT CASE WHEN EXISTS (SELECT 1 FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Schedule))
                          WHERE t.schedule_name = @Name) THEN 1 ELSE 0 END;`

// A handled tick is recorded in the caller's transaction by sqlbase's
// ScheduleFire, with the five statements below: tag the tasks enqueued for it,
// insert the run's audit row (its primary key refuses a second record of the
// tick: error 2627, ErrConflict), advance next_run only if it still equals the
// value read (or, for run-now, only note the last run), and prune old history,
// at most 1,000 rows. None is retried: on ErrConflict (or any error) the
// caller rolls back.

// scheduleTagSQL tags the tasks enqueued for a tick, 1,000 per UPDATE: one
// statement holding 5,000 locks on one index makes SQL Server try a table lock,
// which the claims' READPAST cannot pass over. In: schedule name, tick, task
// ids (a JSON array, whose keys are 0..n-1).
const scheduleTagSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(200) = @pName,
        @ScheduledFor datetime2(7) = @pScheduledFor,
        @TaskIds nvarchar(max) = @pTaskIds,
        @Count int,
        @ChunkStart int = 0,
        @ChunkEnd int;
SELECT @Count = COUNT(*) FROM OPENJSON(@TaskIds);
WHILE @ChunkStart < @Count
BEGIN
    SET @ChunkEnd = @ChunkStart + 999;
    UPDATE t
       SET schedule_name = @Name, scheduled_for = @ScheduledFor
      FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(PK_Tasks))
     WHERE t.id IN (SELECT CONVERT(bigint, j.[value]) FROM OPENJSON(@TaskIds) AS j
                     WHERE CONVERT(int, j.[key]) BETWEEN @ChunkStart AND @ChunkEnd);
    SET @ChunkStart = @ChunkEnd + 1;
END;`

// scheduleRunSQL inserts a tick's audit row. In: schedule id, tick, outcome,
// process id (NULL, sent as 0: none), task count, worker.
const scheduleRunSQL = `
SET NOCOUNT ON;
DECLARE @ScheduleId bigint = @pScheduleId,
        @ScheduledFor datetime2(7) = @pScheduledFor,
        @Outcome varchar(20) = @pOutcome,
        @ProcessId bigint = @pProcessId,
        @TaskCount int = @pTaskCount,
        @WorkerId nvarchar(200) = @pWorkerId;
INSERT INTO stageq.ScheduleRuns (schedule_id, scheduled_for, outcome, process_id, task_count, worker_id, fired_at)
VALUES (@ScheduleId, @ScheduledFor, @Outcome, NULLIF(@ProcessId, 0), @TaskCount, @WorkerId, SYSUTCDATETIME());`

// scheduleAdvanceSQL moves next_run, fenced by the value read under the lock.
// In: schedule id, that next_run, the new one, tick, outcome, worker. Out: rows
// changed (0: next_run had moved).
const scheduleAdvanceSQL = `
SET NOCOUNT ON;
DECLARE @ScheduleId bigint = @pScheduleId,
        @PrevNextRun datetime2(7) = @pPrevNextRun,
        @NextRun datetime2(7) = @pNextRun,
        @ScheduledFor datetime2(7) = @pScheduledFor,
        @Outcome varchar(20) = @pOutcome,
        @WorkerId nvarchar(200) = @pWorkerId,
        @Now datetime2(7) = SYSUTCDATETIME();
UPDATE stageq.Schedules
   SET next_run = @NextRun, last_run = @ScheduledFor, last_outcome = @Outcome,
       last_worker_id = @WorkerId, last_fired_at = @Now, updated_at = @Now
 WHERE id = @ScheduleId AND next_run = @PrevNextRun;
SELECT @@ROWCOUNT;`

// scheduleTouchSQL notes a run-now tick, leaving next_run alone. In: schedule
// id, tick, outcome, worker.
const scheduleTouchSQL = `
SET NOCOUNT ON;
DECLARE @ScheduleId bigint = @pScheduleId,
        @ScheduledFor datetime2(7) = @pScheduledFor,
        @Outcome varchar(20) = @pOutcome,
        @WorkerId nvarchar(200) = @pWorkerId,
        @Now datetime2(7) = SYSUTCDATETIME();
UPDATE stageq.Schedules
   SET last_run = @ScheduledFor, last_outcome = @Outcome, last_worker_id = @WorkerId,
       last_fired_at = @Now, updated_at = @Now
 WHERE id = @ScheduleId;`

// schedulePruneRunsSQL deletes up to 1,000 of a schedule's runs older than the
// cut-off: ticks before it that were also handled before it (a missed tick or a
// catch-up run recorded after a long outage stays however old its tick). In:
// schedule id, cut-off.
const schedulePruneRunsSQL = `
SET NOCOUNT ON;
DECLARE @ScheduleId bigint = @pScheduleId,
        @PruneBefore datetime2(7) = @pPruneBefore;
DELETE TOP (1000) FROM stageq.ScheduleRuns
 WHERE schedule_id = @ScheduleId AND scheduled_for < @PruneBefore AND fired_at < @PruneBefore;`

// scheduleIDs is a tick's task ids as scheduleTagSQL takes them: a JSON array.
func scheduleIDs(ids []int64) (any, error) {
	if ids == nil {
		ids = []int64{}
	}
	b, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// scheduleNextDueSQL reads the earliest unpaused next_run (NULL: none) and the
// database's clock. No parameters. A seek on IX_Schedules_Due.
const scheduleNextDueSQL = `
SET NOCOUNT ON;
SELECT MIN(s.next_run), SYSUTCDATETIME()
  FROM stageq.Schedules AS s WITH (INDEX(IX_Schedules_Due))
 WHERE s.paused = 0;`

// scheduleRunListSQL reads a schedule's runs, newest first (the caller reverses
// them), with the name of each run's process while retention keeps it. In:
// schedule name, row limit. Out: runs.
const scheduleRunListSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(400) = @pName,
        @Limit int = @pLimit;
SELECT TOP (@Limit) r.scheduled_for, r.outcome, COALESCE(r.process_id, 0), COALESCE(p.name, N''), r.task_count,
       r.worker_id, r.fired_at
  FROM stageq.ScheduleRuns AS r
  JOIN stageq.Schedules AS s ON s.id = r.schedule_id
  LEFT JOIN stageq.Processes AS p ON p.id = r.process_id
 WHERE s.name = @Name
 ORDER BY r.scheduled_for DESC;`

// clockNowSQL reads the database's clock, the one every lease and tick is judged
// by. No parameters. Out: SYSUTCDATETIME() (UTC, 100 ns).
const clockNowSQL = `SELECT SYSUTCDATETIME();`
