package sqlbase

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/stageq/stageq/dialect"
)

// ScheduleStatements are a dialect's texts for the Scheduler's schedules. Every
// schedule read returns dialect.ScanSchedule's columns; the two locking reads
// add the database's now after them.
type ScheduleStatements struct {
	// Create: in name, cron (NULL for an interval), interval ms (NULL for cron),
	// plan, missed, grace ms, singleton, paused, next_run. Out: the id.
	Create string
	// List: in name ("" for all).
	List string
	// Pause: in name, paused. Delete: in name.
	Pause, Delete string
	// LockDue reads the earliest due schedule no other scheduler holds and holds
	// it until the transaction ends. No parameters.
	LockDue string
	// Lock reads a schedule by name, waiting for other holders. In: name.
	Lock string
	// Unfinished: in name. Out: whether a task of the schedule is in the queue.
	Unfinished string
	// Tag marks the tasks of a tick. In: schedule name, tick, task ids (IDs).
	Tag string
	// Run records a tick. In: schedule id, tick, outcome, process id (NULL:
	// none), task count, worker.
	Run string
	// Advance moves next_run, fenced by the next_run read under the lock. In:
	// schedule id, that next_run, the new one, tick, outcome, worker. Counts
	// the rows it changed (execCount): 1, or 0 when next_run had moved.
	Advance string
	// Touch records a run-now tick, leaving next_run alone. In: schedule id,
	// tick, outcome, worker.
	Touch string
	// PruneRuns deletes a schedule's runs whose tick and handling both
	// came before the cut-off. In: schedule id, cut-off.
	PruneRuns string
	// NextDue: out the earliest unpaused next_run (NULL: none) and the
	// database's now.
	NextDue string
	// RunList: in schedule name, limit. Out: its runs, newest first, each
	// with its process's name ('' once pruned) after the process id.
	RunList string
	// ClockNow: out the database's now.
	ClockNow string
}

func (b *Base) scheduleErr(what string, err error) error {
	if b.IsUnique(err) {
		return fmt.Errorf("%s: %w", what, dialect.ErrExists)
	}
	return fmt.Errorf("%s: %w", what, b.MapErr(err))
}

// ScheduleCreate implements dialect.Scheduler.
func (b *Base) ScheduleCreate(ctx context.Context, tx *sql.Tx, sp dialect.ScheduleCreateParams) (int64, error) {
	var id int64
	create := func(ctx context.Context) error {
		return b.on(tx).QueryRowContext(ctx, b.Schedule.Create, sp.Name, dialect.NullString(sp.Cron), nullMillis(sp.Interval),
			sp.Plan, sp.Missed, sp.Grace.Milliseconds(), sp.Singleton, sp.Paused, b.Time(sp.NextRun)).Scan(&id)
	}
	// Not repeated after a lost answer: a create that did happen would then
	// report the name taken.
	if err := b.inTxOrOnPool(ctx, tx, false, create); err != nil {
		return 0, b.scheduleErr(fmt.Sprintf("create schedule %q", sp.Name), err)
	}
	return id, nil
}

// ScheduleList implements dialect.Scheduler.
func (b *Base) ScheduleList(ctx context.Context, f dialect.ScheduleFilter) ([]dialect.ScheduleInfo, error) {
	return list(ctx, b, "schedules", b.Schedule.List, func(r *sql.Rows, s *dialect.ScheduleInfo) (err error) {
		*s, err = dialect.ScanSchedule(r.Scan)
		return err
	}, f.Name)
}

// ScheduleSetPaused implements dialect.Scheduler.
func (b *Base) ScheduleSetPaused(ctx context.Context, sp dialect.SchedulePauseParams) error {
	var n int64
	err := b.onPool(ctx, true, func(ctx context.Context) (err error) {
		n, err = b.execCount(ctx, b.Pool, b.Schedule.Pause, sp.Name, sp.Paused)
		return err
	})
	if err != nil {
		return fmt.Errorf("pause schedule %q: %w", sp.Name, b.MapErr(err))
	}
	return someRow(n, "schedule "+sp.Name)
}

// ScheduleDelete implements dialect.Scheduler. The run history goes with it
// (ON DELETE CASCADE).
func (b *Base) ScheduleDelete(ctx context.Context, name string) error {
	n, err := b.deleteOnce(ctx, b.Schedule.Delete, name)
	if err != nil {
		return fmt.Errorf("delete schedule %q: %w", name, b.MapErr(err))
	}
	return someRow(n, "schedule "+name)
}

// lockSchedule runs one of the locking reads: the schedule, then the
// database's now.
func (b *Base) lockSchedule(ctx context.Context, tx *sql.Tx, stmt string, args ...any) (dialect.ScheduleInfo, time.Time, error) {
	var now dialect.TimeScan
	s, err := dialect.ScanSchedule(func(dest ...any) error {
		return b.on(tx).QueryRowContext(ctx, stmt, args...).Scan(append(dest, &now)...)
	})
	return s, now.Time, err
}

// ScheduleLockDue implements dialect.Scheduler.
func (b *Base) ScheduleLockDue(ctx context.Context, tx *sql.Tx) (dialect.ScheduleInfo, time.Time, bool, error) {
	s, now, err := b.lockSchedule(ctx, tx, b.Schedule.LockDue)
	if errors.Is(err, sql.ErrNoRows) {
		return s, now, false, nil
	}
	if err != nil {
		return s, now, false, fmt.Errorf("lock due schedule: %w", b.MapErr(err))
	}
	return s, now, true, nil
}

// ScheduleLock implements dialect.Scheduler.
func (b *Base) ScheduleLock(ctx context.Context, tx *sql.Tx, name string) (dialect.ScheduleInfo, time.Time, error) {
	s, now, err := b.lockSchedule(ctx, tx, b.Schedule.Lock, name)
	if errors.Is(err, sql.ErrNoRows) {
		return s, now, fmt.Errorf("schedule %q: %w", name, dialect.ErrNotFound)
	}
	if err != nil {
		return s, now, fmt.Errorf("lock schedule %q: %w", name, b.MapErr(err))
	}
	return s, now, nil
}

// ScheduleUnfinished implements dialect.Scheduler.
func (b *Base) ScheduleUnfinished(ctx context.Context, tx *sql.Tx, name string) (bool, error) {
	var exists bool
	if err := b.on(tx).QueryRowContext(ctx, b.Schedule.Unfinished, name).Scan(&exists); err != nil {
		return false, fmt.Errorf("schedule %q: unfinished runs: %w", name, b.MapErr(err))
	}
	return exists, nil
}

// ScheduleFire implements dialect.Scheduler.
func (b *Base) ScheduleFire(ctx context.Context, tx *sql.Tx, fp dialect.ScheduleFireParams) error {
	q := b.on(tx)
	tick := b.Time(fp.ScheduledFor)
	if len(fp.TaskIDs) > 0 {
		ids, err := b.IDs(fp.TaskIDs)
		if err != nil {
			return fmt.Errorf("schedule %q: task ids: %w", fp.ScheduleName, err)
		}
		if _, err := q.ExecContext(ctx, b.Schedule.Tag, fp.ScheduleName, tick, ids); err != nil {
			return fmt.Errorf("schedule %q: tag tasks: %w", fp.ScheduleName, b.MapErr(err))
		}
	}
	if err := b.recordRun(ctx, q, fp, tick); err != nil {
		return err
	}
	if fp.Advance {
		n, err := b.execCount(ctx, q, b.Schedule.Advance, fp.ScheduleID, b.Time(fp.PrevNextRun), b.Time(fp.NextRun),
			tick, fp.Outcome, fp.WorkerID)
		if err != nil {
			return fmt.Errorf("schedule %q: advance: %w", fp.ScheduleName, b.MapErr(err))
		}
		if n != 1 {
			return fmt.Errorf("schedule %q: advance from %s: %w", fp.ScheduleName, fp.PrevNextRun.Format(time.RFC3339Nano), dialect.ErrConflict)
		}
	} else if _, err := q.ExecContext(ctx, b.Schedule.Touch, fp.ScheduleID, tick, fp.Outcome, fp.WorkerID); err != nil {
		return fmt.Errorf("schedule %q: record last run: %w", fp.ScheduleName, b.MapErr(err))
	}
	if !fp.PruneBefore.IsZero() {
		if _, err := q.ExecContext(ctx, b.Schedule.PruneRuns, fp.ScheduleID, b.Time(fp.PruneBefore)); err != nil {
			return fmt.Errorf("schedule %q: prune run history: %w", fp.ScheduleName, b.MapErr(err))
		}
	}
	return nil
}

// recordRun writes the tick's run row, unless it has one (fp.Recorded).
func (b *Base) recordRun(ctx context.Context, q dialect.Querier, fp dialect.ScheduleFireParams, tick any) error {
	if fp.Recorded {
		return nil
	}
	var pid sql.NullInt64
	if fp.ProcessID != 0 {
		pid = sql.NullInt64{Int64: fp.ProcessID, Valid: true}
	}
	_, err := q.ExecContext(ctx, b.Schedule.Run, fp.ScheduleID, tick, fp.Outcome, pid, len(fp.TaskIDs), fp.WorkerID)
	if b.IsUnique(err) {
		return fmt.Errorf("schedule %q: tick %s: %w", fp.ScheduleName, fp.ScheduledFor.Format(time.RFC3339Nano), dialect.ErrTickRecorded)
	}
	if err != nil {
		return fmt.Errorf("schedule %q: record run: %w", fp.ScheduleName, b.MapErr(err))
	}
	return nil
}

// ScheduleNextDue implements dialect.Scheduler.
func (b *Base) ScheduleNextDue(ctx context.Context) (time.Duration, bool, error) {
	var next, now dialect.TimeScan
	err := b.onPool(ctx, true, func(ctx context.Context) error {
		return b.Pool.QueryRowContext(ctx, b.Schedule.NextDue).Scan(&next, &now)
	})
	if err != nil {
		return 0, false, fmt.Errorf("next due schedule: %w", b.MapErr(err))
	}
	if next.Time.IsZero() {
		return 0, false, nil
	}
	return next.Time.Sub(now.Time), true, nil
}

// ScheduleRunList implements dialect.Scheduler.
func (b *Base) ScheduleRunList(ctx context.Context, f dialect.ScheduleRunFilter) ([]dialect.ScheduleRun, error) {
	out, err := list(ctx, b, fmt.Sprintf("runs of schedule %q", f.Name), b.Schedule.RunList, dialect.ScanScheduleRun, f.Name, rowLimit(f.Limit))
	if err != nil {
		return nil, err
	}
	slices.Reverse(out) // newest first in the query (for its LIMIT), oldest first here
	return out, nil
}

// ClockNow implements dialect.Scheduler: the database's clock, the one every
// schedule and lease statement compares with.
func (b *Base) ClockNow(ctx context.Context, tx *sql.Tx) (time.Time, error) {
	var now dialect.TimeScan
	read := func(ctx context.Context) error {
		return b.on(tx).QueryRowContext(ctx, b.Schedule.ClockNow).Scan(&now)
	}
	if err := b.inTxOrOnPool(ctx, tx, true, read); err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", b.MapErr(err))
	}
	return now.Time, nil
}

func nullMillis(d time.Duration) sql.NullInt64 {
	return sql.NullInt64{Int64: d.Milliseconds(), Valid: d > 0}
}

// someRow turns "no row changed" into ErrNotFound.
func someRow(n int64, what string) error {
	if n == 0 {
		return fmt.Errorf("%s: %w", what, dialect.ErrNotFound)
	}
	return nil
}
