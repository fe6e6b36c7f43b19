package sqlserver

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stageq/stageq/dialect"
)

// Schedules (dialect.Scheduler). A worker locks a due schedule row with UPDLOCK +
// READPAST in its transaction (racing workers pass over it), enqueues the tick
// with Submit and records it with ScheduleFire in the same transaction; the
// next_run predicate of the advance and the primary key of ScheduleRuns are two
// more fences behind the row lock. Every time decision uses SYSUTCDATETIME().

// scheduleCreateSQL inserts a schedule. In: name, cron (empty for an interval),
// interval ms (0 for cron), plan JSON, missed policy, grace ms, singleton, paused,
// first next_run. Out: the id. A duplicate name is error 2627 (ErrExists).
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

// ScheduleCreate implements dialect.Scheduler.
func (d *SQLServer) ScheduleCreate(ctx context.Context, tx *sql.Tx, sp dialect.ScheduleCreateParams) (int64, error) {
	q := dialect.On(d.db, tx)
	for _, c := range []struct{ field, v string }{{"schedule name", sp.Name}, {"cron", sp.Cron}} {
		if err := checkLen(c.field, c.v, maxName); err != nil {
			return 0, fmt.Errorf("create schedule %q: %w", sp.Name, err)
		}
	}
	if err := checkLen("missed policy", sp.Missed, 10); err != nil {
		return 0, fmt.Errorf("create schedule %q: %w", sp.Name, err)
	}
	var id int64
	run := func(ctx context.Context) error {
		return q.QueryRowContext(ctx, scheduleCreateSQL,
			nvarchar("pName", sp.Name),
			nvarchar("pCron", sp.Cron),
			bigint("pIntervalMs", sp.Interval.Milliseconds()),
			nvarchar("pPlan", sp.Plan),
			nvarchar("pMissed", sp.Missed),
			bigint("pGraceMs", sp.Grace.Milliseconds()),
			bit("pSingleton", sp.Singleton),
			bit("pPaused", sp.Paused),
			datetime2("pNextRun", sp.NextRun)).Scan(&id)
	}
	err := d.retryOn(ctx, tx, retrySafe, run)
	if isUniqueViolation(err) {
		return 0, fmt.Errorf("create schedule %q: %w", sp.Name, dialect.ErrExists)
	}
	if err != nil {
		return 0, fmt.Errorf("create schedule %q: %w", sp.Name, mapErr(err))
	}
	return id, nil
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

// The schedule statements sqlbase runs (base.go): list, pause, delete, next due,
// run list and the clock. A name is looked up in an nvarchar(400) local, so a
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

// ScheduleLockDue implements dialect.Scheduler.
func (d *SQLServer) ScheduleLockDue(ctx context.Context, tx *sql.Tx) (dialect.ScheduleInfo, time.Time, bool, error) {
	var now time.Time
	s, err := dialect.ScanSchedule(func(dest ...any) error {
		return tx.QueryRowContext(ctx, scheduleLockDueSQL).Scan(append(dest, &now)...)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return s, now, false, nil
	}
	if err != nil {
		return s, now, false, fmt.Errorf("lock due schedule: %w", mapErr(err))
	}
	return s, now, true, nil
}

// scheduleLockSQL locks the named schedule in the caller's transaction, waiting
// for other holders. In: name. Out: the schedule and the database's now.
const scheduleLockSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(200) = @pName;
SELECT s.id, s.name, COALESCE(s.cron, N''), COALESCE(s.interval_ms, 0), s.[plan], s.missed, s.grace_ms,
       s.singleton, s.paused, s.next_run, s.last_run, COALESCE(s.last_outcome, ''),
       COALESCE(s.last_worker_id, N''), s.last_fired_at, SYSUTCDATETIME()
  FROM stageq.Schedules AS s WITH (UPDLOCK, ROWLOCK)
 WHERE s.name = @Name;`

// ScheduleLock implements dialect.Scheduler.
func (d *SQLServer) ScheduleLock(ctx context.Context, tx *sql.Tx, name string) (dialect.ScheduleInfo, time.Time, error) {
	var now time.Time
	if err := checkLen("schedule name", name, maxName); err != nil {
		return dialect.ScheduleInfo{}, now, fmt.Errorf("lock schedule: %w", err)
	}
	s, err := dialect.ScanSchedule(func(dest ...any) error {
		return tx.QueryRowContext(ctx, scheduleLockSQL, nvarchar("pName", name)).Scan(append(dest, &now)...)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return s, now, fmt.Errorf("schedule %q: %w", name, dialect.ErrNotFound)
	}
	if err != nil {
		return s, now, fmt.Errorf("lock schedule %q: %w", name, mapErr(err))
	}
	return s, now, nil
}

// scheduleUnfinishedSQL says whether a task of the schedule is still queued. In:
// schedule name. Out: 1 or 0. A seek on IX_Tasks_Schedule, whose keys no claim or
// lease extension changes.
const scheduleUnfinishedSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(200) = @pName;
SELECT CASE WHEN EXISTS (SELECT 1 FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Schedule))
                          WHERE t.schedule_name = @Name) THEN 1 ELSE 0 END;`

// ScheduleUnfinished implements dialect.Scheduler.
func (d *SQLServer) ScheduleUnfinished(ctx context.Context, tx *sql.Tx, name string) (bool, error) {
	var exists bool
	if err := tx.QueryRowContext(ctx, scheduleUnfinishedSQL, nvarchar("pName", name)).Scan(&exists); err != nil {
		return false, fmt.Errorf("schedule %q: unfinished runs: %w", name, mapErr(err))
	}
	return exists, nil
}

// scheduleFireSQL records one handled tick in the caller's transaction: it tags
// the tasks enqueued for it (ids as a JSON array), inserts the run's audit row
// (its primary key refuses a second record of the tick: error 2627, ErrConflict),
// advances next_run only if it still equals the value read (or, for run-now,
// only notes the last run) and prunes old history, at most 1,000 rows. In:
// schedule id and name, worker, tick, outcome, process id (0: none), task ids,
// advance flag, next_run read, new next_run, prune flag, cut-off. Out: 1 when
// next_run advanced (or no advance was asked), 0 when it had moved.
const scheduleFireSQL = `
SET NOCOUNT ON;
DECLARE @ScheduleId bigint = @pScheduleId,
        @Name nvarchar(200) = @pName,
        @WorkerId nvarchar(200) = @pWorkerId,
        @ScheduledFor datetime2(7) = @pScheduledFor,
        @Outcome varchar(20) = @pOutcome,
        @ProcessId bigint = @pProcessId,
        @TaskIds nvarchar(max) = @pTaskIds,
        @Advance bit = @pAdvance,
        @PrevNextRun datetime2(7) = @pPrevNextRun,
        @NextRun datetime2(7) = @pNextRun,
        @Prune bit = @pPrune,
        @PruneBefore datetime2(7) = @pPruneBefore,
        @Count int,
        @Advanced int = 1,
        @ChunkStart int = 0,
        @ChunkEnd int,
        @Now datetime2(7) = SYSUTCDATETIME();
SELECT @Count = COUNT(*) FROM OPENJSON(@TaskIds);
-- 1,000 tasks per UPDATE: one statement holding 5,000 locks on one index makes SQL
-- Server try a table lock, which the claims' READPAST cannot pass over. The array's
-- keys are 0..n-1.
WHILE @ChunkStart < @Count
BEGIN
    SET @ChunkEnd = @ChunkStart + 999;
    UPDATE t
       SET schedule_name = @Name, scheduled_for = @ScheduledFor
      FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(PK_Tasks))
     WHERE t.id IN (SELECT CONVERT(bigint, j.[value]) FROM OPENJSON(@TaskIds) AS j
                     WHERE CONVERT(int, j.[key]) BETWEEN @ChunkStart AND @ChunkEnd);
    SET @ChunkStart = @ChunkEnd + 1;
END;
INSERT INTO stageq.ScheduleRuns (schedule_id, scheduled_for, outcome, process_id, task_count, worker_id, fired_at)
VALUES (@ScheduleId, @ScheduledFor, @Outcome, NULLIF(@ProcessId, 0), @Count, @WorkerId, @Now);
IF @Advance = 1
BEGIN
    UPDATE stageq.Schedules
       SET next_run = @NextRun, last_run = @ScheduledFor, last_outcome = @Outcome,
           last_worker_id = @WorkerId, last_fired_at = @Now, updated_at = @Now
     WHERE id = @ScheduleId AND next_run = @PrevNextRun;
    SET @Advanced = @@ROWCOUNT;
END
ELSE
    UPDATE stageq.Schedules
       SET last_run = @ScheduledFor, last_outcome = @Outcome, last_worker_id = @WorkerId,
           last_fired_at = @Now, updated_at = @Now
     WHERE id = @ScheduleId;
IF @Advanced = 1 AND @Prune = 1
    DELETE TOP (1000) FROM stageq.ScheduleRuns WHERE schedule_id = @ScheduleId AND scheduled_for < @PruneBefore;
SELECT @Advanced;`

// ScheduleFire implements dialect.Scheduler. It runs in the caller's transaction
// and is never retried here: on ErrConflict (or any error) the caller rolls back.
func (d *SQLServer) ScheduleFire(ctx context.Context, tx *sql.Tx, fp dialect.ScheduleFireParams) error {
	ids := fp.TaskIDs
	if ids == nil {
		ids = []int64{}
	}
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		return fmt.Errorf("schedule %q: encode task ids: %w", fp.ScheduleName, err)
	}
	var advanced int
	err = tx.QueryRowContext(ctx, scheduleFireSQL,
		bigint("pScheduleId", fp.ScheduleID),
		nvarchar("pName", fp.ScheduleName),
		nvarchar("pWorkerId", fp.WorkerID),
		datetime2("pScheduledFor", fp.ScheduledFor),
		nvarchar("pOutcome", fp.Outcome),
		bigint("pProcessId", fp.ProcessID),
		nvarchar("pTaskIds", string(idsJSON)),
		bit("pAdvance", fp.Advance),
		datetime2("pPrevNextRun", fp.PrevNextRun),
		datetime2("pNextRun", fp.NextRun),
		bit("pPrune", !fp.PruneBefore.IsZero()),
		datetime2("pPruneBefore", fp.PruneBefore)).Scan(&advanced)
	if isUniqueViolation(err) {
		return fmt.Errorf("schedule %q: tick %s: %w", fp.ScheduleName, fp.ScheduledFor.Format(time.RFC3339Nano), dialect.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("schedule %q: record run: %w", fp.ScheduleName, mapErr(err))
	}
	if advanced != 1 {
		return fmt.Errorf("schedule %q: advance from %s: %w", fp.ScheduleName, fp.PrevNextRun.Format(time.RFC3339Nano), dialect.ErrConflict)
	}
	return nil
}

// scheduleNextDueSQL reads the earliest unpaused next_run (NULL: none) and the
// database's clock. No parameters. A seek on IX_Schedules_Due.
const scheduleNextDueSQL = `
SET NOCOUNT ON;
SELECT MIN(s.next_run), SYSUTCDATETIME()
  FROM stageq.Schedules AS s WITH (INDEX(IX_Schedules_Due))
 WHERE s.paused = 0;`

// scheduleRunListSQL reads a schedule's runs, newest first (the caller reverses
// them). In: schedule name, row limit. Out: runs.
const scheduleRunListSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(400) = @pName,
        @Limit int = @pLimit;
SELECT TOP (@Limit) r.scheduled_for, r.outcome, COALESCE(r.process_id, 0), r.task_count, r.worker_id, r.fired_at
  FROM stageq.ScheduleRuns AS r
  JOIN stageq.Schedules AS s ON s.id = r.schedule_id
 WHERE s.name = @Name
 ORDER BY r.scheduled_for DESC;`

// clockNowSQL reads the database's clock, the one every lease and tick is judged
// by. No parameters. Out: SYSUTCDATETIME() (UTC, 100 ns).
const clockNowSQL = `SELECT SYSUTCDATETIME();`
