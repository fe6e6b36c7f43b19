package dialect

import (
	"context"
	"database/sql"
	"time"
)

// QueryAll runs stmt on q and reads every row with scan, which fills in one value
// from the current row. The caller wraps the error with what it was doing; driver
// errors go through mapErr first.
func QueryAll[T any](ctx context.Context, q Querier, mapErr func(error) error, stmt string, scan func(r *sql.Rows, v *T) error, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	out, err := scanAll(rows, scan)
	if err != nil {
		return nil, mapErr(err)
	}
	return out, nil
}

// KeepErr is the mapErr of a read whose errors stand for none of stageq's
// sentinels (catalog and statistics reads, or a caller that classifies the
// driver's error itself): it leaves them as they are.
func KeepErr(err error) error { return err }

// scanAll reads every row of rows with scan and closes rows.
func scanAll[T any](rows *sql.Rows, scan func(r *sql.Rows, v *T) error) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// ptr is the scanned time, or nil where the column was NULL.
func (t TimeScan) ptr() *time.Time {
	if t.Time.IsZero() {
		return nil
	}
	return &t.Time
}

// The scanners below read the rows that every dialect's list statements
// return, in the column order their doc comments give; times may come as
// time.Time or as SQLite's text (TimeScan).

// ScanLogEntry reads id, task, process id and name, order, kind, body, worker,
// attempt, started_at, ended_at, outcome, error, retry_at, schedule.
func ScanLogEntry(r *sql.Rows, e *LogEntry) error {
	var started, ended, retry TimeScan
	var outcome string
	if err := r.Scan(&e.ID, &e.TaskID, &e.ProcessID, &e.Process, &e.Order, &e.Kind, &e.Body,
		&e.WorkerID, &e.Attempt, &started, &ended, &outcome, &e.Error, &retry, &e.Schedule); err != nil {
		return err
	}
	e.Outcome, e.StartedAt, e.EndedAt, e.RetryAt = Outcome(outcome), started.Time, ended.ptr(), retry.ptr()
	return nil
}

// ScanTaskInfo reads id, process, order, kind, body, state, attempt,
// max_attempts, priority, run_at, worker, last error, abandons.
func ScanTaskInfo(r *sql.Rows, t *TaskInfo) error {
	var runAt TimeScan
	if err := r.Scan(&t.ID, &t.Process, &t.Order, &t.Kind, &t.Body, &t.State, &t.Attempt,
		&t.MaxAttempts, &t.Priority, &runAt, &t.WorkerID, &t.LastError, &t.Abandons); err != nil {
		return err
	}
	t.RunAt = runAt.Time
	return nil
}

// ScanWorkerStatus reads id, hostname, pid, concurrency, version, started_at,
// heartbeat_at, stopped_at, running tasks, the database's now.
func ScanWorkerStatus(r *sql.Rows, w *WorkerStatus) error {
	var started, beat, stopped, now TimeScan
	if err := r.Scan(&w.ID, &w.Hostname, &w.PID, &w.Concurrency, &w.Version, &started, &beat,
		&stopped, &w.Running, &now); err != nil {
		return err
	}
	w.StartedAt, w.HeartbeatAt, w.StoppedAt, w.Now = started.Time, beat.Time, stopped.ptr(), now.Time
	return nil
}

// ScanLimitInfo reads key, max, updated_at, running.
func ScanLimitInfo(r *sql.Rows, l *LimitInfo) error {
	var updated TimeScan
	if err := r.Scan(&l.Key, &l.Max, &updated, &l.Running); err != nil {
		return err
	}
	l.UpdatedAt = updated.Time
	return nil
}

// ScanSchedule reads a schedule's columns through scan (a Row's or Rows' Scan,
// possibly extended with more destinations by the caller): id, name, cron,
// interval ms, plan, missed, grace ms, singleton, paused, next_run, last_run,
// last outcome, last worker, last_fired_at.
func ScanSchedule(scan func(dest ...any) error) (ScheduleInfo, error) {
	var s ScheduleInfo
	var intervalMS, graceMS int64
	var next, lastRun, lastFired TimeScan
	if err := scan(&s.ID, &s.Name, &s.Cron, &intervalMS, &s.Plan, &s.Missed, &graceMS, &s.Singleton, &s.Paused,
		&next, &lastRun, &s.LastOutcome, &s.LastWorkerID, &lastFired); err != nil {
		return s, err
	}
	s.Interval = time.Duration(intervalMS) * time.Millisecond
	s.Grace = time.Duration(graceMS) * time.Millisecond
	s.NextRun, s.LastRun, s.LastFiredAt = next.Time, lastRun.ptr(), lastFired.ptr()
	return s, nil
}

// ScanScheduleRun reads scheduled_for, outcome, process id, process name (empty:
// pruned or none), task count, worker, fired_at.
func ScanScheduleRun(r *sql.Rows, run *ScheduleRun) error {
	var at, fired TimeScan
	if err := r.Scan(&at, &run.Outcome, &run.ProcessID, &run.Process, &run.TaskCount, &run.WorkerID, &fired); err != nil {
		return err
	}
	run.ScheduledFor, run.FiredAt = at.Time, fired.Time
	return nil
}

// ScanTaskLease reads a task's id and lease token.
func ScanTaskLease(r *sql.Rows, l *TaskLease) error { return r.Scan(&l.ID, &l.Token) }

// ScanLeaseInfo reads an exclusive lease's name, holder, token, acquired_at,
// expires_at and the database's now.
func ScanLeaseInfo(r *sql.Rows, l *LeaseInfo) error {
	var acquired, expires, now TimeScan
	if err := r.Scan(&l.Name, &l.Holder, &l.Token, &acquired, &expires, &now); err != nil {
		return err
	}
	l.AcquiredAt, l.ExpiresAt, l.Now = acquired.Time, expires.Time, now.Time
	return nil
}
