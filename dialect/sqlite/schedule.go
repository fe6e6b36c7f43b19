package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/stageq/stageq/dialect"
)

// scheduleColumns is the column list every schedule read returns, in the order
// scanSchedule expects.
const scheduleColumns = `id, name, coalesce(cron, ''), coalesce(interval_ms, 0), plan, missed, grace_ms,
       singleton, paused, next_run, last_run, coalesce(last_outcome, ''), coalesce(last_worker_id, ''), last_fired_at`

// In: name, cron (NULL for an interval), interval ms (NULL for cron), plan JSON,
// missed policy, grace ms, singleton, paused, first next_run. Out: the id.
const scheduleCreateSQL = `
INSERT INTO stageq_schedules (name, cron, interval_ms, plan, missed, grace_ms, singleton, paused, next_run)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
RETURNING id`

// ScheduleCreate implements dialect.Scheduler.
func (s *SQLite) ScheduleCreate(ctx context.Context, tx *sql.Tx, sp dialect.ScheduleCreateParams) (int64, error) {
	q := s.on(tx)
	var id int64
	err := q.QueryRowContext(ctx, scheduleCreateSQL, sp.Name, dialect.NullString(sp.Cron), nullMillis(sp.Interval),
		sp.Plan, sp.Missed, sp.Grace.Milliseconds(), sp.Singleton, sp.Paused, formatTime(sp.NextRun)).Scan(&id)
	if err != nil {
		if isUnique(err) {
			return 0, fmt.Errorf("create schedule %q: %w", sp.Name, dialect.ErrExists)
		}
		return 0, fmt.Errorf("create schedule %q: %w", sp.Name, mapErr(err))
	}
	return id, nil
}

// In: name (empty for all).
const scheduleListSQL = `SELECT ` + scheduleColumns + `
  FROM stageq_schedules WHERE (?1 = '' OR name = ?1) ORDER BY name`

// ScheduleList implements dialect.Scheduler.
func (s *SQLite) ScheduleList(ctx context.Context, f dialect.ScheduleFilter) ([]dialect.ScheduleInfo, error) {
	rows, err := s.pool().QueryContext(ctx, scheduleListSQL, f.Name)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", mapErr(err))
	}
	defer rows.Close()
	var out []dialect.ScheduleInfo
	for rows.Next() {
		sc, err := scanSchedule(rows.Scan)
		if err != nil {
			return nil, fmt.Errorf("list schedules: %w", err)
		}
		out = append(out, sc)
	}
	return out, rows.Err()
}

// In: paused, name.
const schedulePauseSQL = `
UPDATE stageq_schedules SET paused = ?, updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE name = ?`

// ScheduleSetPaused implements dialect.Scheduler.
func (s *SQLite) ScheduleSetPaused(ctx context.Context, sp dialect.SchedulePauseParams) error {
	res, err := s.pool().ExecContext(ctx, schedulePauseSQL, sp.Paused, sp.Name)
	if err != nil {
		return fmt.Errorf("pause schedule %q: %w", sp.Name, mapErr(err))
	}
	return oneRow(res, "schedule "+sp.Name)
}

const scheduleDeleteSQL = `DELETE FROM stageq_schedules WHERE name = ?`

// ScheduleDelete implements dialect.Scheduler. The run history goes with it
// (ON DELETE CASCADE, with the foreign_keys pragma every connection sets).
func (s *SQLite) ScheduleDelete(ctx context.Context, name string) error {
	res, err := s.pool().ExecContext(ctx, scheduleDeleteSQL, name)
	if err != nil {
		return fmt.Errorf("delete schedule %q: %w", name, mapErr(err))
	}
	return oneRow(res, "schedule "+name)
}

// scheduleLockDueSQL reads the earliest due schedule. The caller's transaction
// began IMMEDIATE, so it holds the database's write lock: no other scheduler
// can read the same row as due until this one commits its advance.
// Out: the schedule and the database's now.
const scheduleLockDueSQL = `SELECT ` + scheduleColumns + `, ` + nowSQL + `
  FROM stageq_schedules
 WHERE paused = 0 AND next_run <= ` + nowSQL + `
 ORDER BY next_run
 LIMIT 1`

// ScheduleLockDue implements dialect.Scheduler.
func (s *SQLite) ScheduleLockDue(ctx context.Context, tx *sql.Tx) (dialect.ScheduleInfo, time.Time, bool, error) {
	var now string
	sc, err := scanSchedule(func(dest ...any) error {
		return tx.QueryRowContext(ctx, scheduleLockDueSQL).Scan(append(dest, &now)...)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return sc, time.Time{}, false, nil
	}
	if err != nil {
		return sc, time.Time{}, false, fmt.Errorf("lock due schedule: %w", mapErr(err))
	}
	t, err := parseTime(now)
	if err != nil {
		return sc, t, false, fmt.Errorf("lock due schedule: %w", err)
	}
	return sc, t, true, nil
}

// In: name. Out: the schedule and the database's now (locked by the caller's
// IMMEDIATE transaction).
const scheduleLockSQL = `SELECT ` + scheduleColumns + `, ` + nowSQL + `
  FROM stageq_schedules WHERE name = ?`

// ScheduleLock implements dialect.Scheduler.
func (s *SQLite) ScheduleLock(ctx context.Context, tx *sql.Tx, name string) (dialect.ScheduleInfo, time.Time, error) {
	var now string
	sc, err := scanSchedule(func(dest ...any) error {
		return tx.QueryRowContext(ctx, scheduleLockSQL, name).Scan(append(dest, &now)...)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return sc, time.Time{}, fmt.Errorf("schedule %q: %w", name, dialect.ErrNotFound)
	}
	if err != nil {
		return sc, time.Time{}, fmt.Errorf("lock schedule %q: %w", name, mapErr(err))
	}
	t, err := parseTime(now)
	if err != nil {
		return sc, t, fmt.Errorf("lock schedule %q: %w", name, err)
	}
	return sc, t, nil
}

// A seek on stageq_tasks_schedule.
const scheduleUnfinishedSQL = `SELECT EXISTS (SELECT 1 FROM stageq_tasks WHERE schedule_name = ?)`

// ScheduleUnfinished implements dialect.Scheduler.
func (s *SQLite) ScheduleUnfinished(ctx context.Context, tx *sql.Tx, name string) (bool, error) {
	var exists bool
	if err := tx.QueryRowContext(ctx, scheduleUnfinishedSQL, name).Scan(&exists); err != nil {
		return false, fmt.Errorf("schedule %q: unfinished runs: %w", name, mapErr(err))
	}
	return exists, nil
}

const (
	// In: schedule name, tick, task ids as a JSON array (SQLite has no arrays).
	scheduleTagSQL = `
UPDATE stageq_tasks SET schedule_name = ?, scheduled_for = ?
 WHERE id IN (SELECT value FROM json_each(?))`
	// In: schedule id, tick, outcome, process id (NULL: none), task count, worker.
	scheduleRunSQL = `
INSERT INTO stageq_schedule_runs (schedule_id, scheduled_for, outcome, process_id, task_count, worker_id)
VALUES (?, ?, ?, ?, ?, ?)`
	// In: new next_run, tick, outcome, worker, schedule id, next_run read before.
	// The next_run predicate is a second fence behind the write lock.
	scheduleAdvanceSQL = `
UPDATE stageq_schedules
   SET next_run = ?, last_run = ?, last_outcome = ?, last_worker_id = ?,
       last_fired_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
 WHERE id = ? AND next_run = ?`
	// In: tick, outcome, worker, schedule id. run-now leaves next_run alone.
	scheduleTouchSQL = `
UPDATE stageq_schedules
   SET last_run = ?, last_outcome = ?, last_worker_id = ?,
       last_fired_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
 WHERE id = ?`
	// In: schedule id, cut-off. A seek on the primary key.
	schedulePruneSQL = `DELETE FROM stageq_schedule_runs WHERE schedule_id = ? AND scheduled_for < ?`
)

// ScheduleFire implements dialect.Scheduler.
func (s *SQLite) ScheduleFire(ctx context.Context, tx *sql.Tx, fp dialect.ScheduleFireParams) error {
	tick := formatTime(fp.ScheduledFor)
	if len(fp.TaskIDs) > 0 {
		ids, err := json.Marshal(fp.TaskIDs)
		if err != nil {
			return fmt.Errorf("schedule %q: encode task ids: %w", fp.ScheduleName, err)
		}
		if _, err := tx.ExecContext(ctx, scheduleTagSQL, fp.ScheduleName, tick, string(ids)); err != nil {
			return fmt.Errorf("schedule %q: tag tasks: %w", fp.ScheduleName, mapErr(err))
		}
	}
	var pid sql.NullInt64
	if fp.ProcessID != 0 {
		pid = sql.NullInt64{Int64: fp.ProcessID, Valid: true}
	}
	if _, err := tx.ExecContext(ctx, scheduleRunSQL, fp.ScheduleID, tick, fp.Outcome, pid, len(fp.TaskIDs), fp.WorkerID); err != nil {
		if isUnique(err) {
			return fmt.Errorf("schedule %q: tick %s: %w", fp.ScheduleName, tick, dialect.ErrConflict)
		}
		return fmt.Errorf("schedule %q: record run: %w", fp.ScheduleName, mapErr(err))
	}
	if fp.Advance {
		res, err := tx.ExecContext(ctx, scheduleAdvanceSQL, formatTime(fp.NextRun), tick, fp.Outcome, fp.WorkerID,
			fp.ScheduleID, formatTime(fp.PrevNextRun))
		if err != nil {
			return fmt.Errorf("schedule %q: advance: %w", fp.ScheduleName, mapErr(err))
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("schedule %q: advance from %s: %w", fp.ScheduleName, formatTime(fp.PrevNextRun), dialect.ErrConflict)
		}
	} else if _, err := tx.ExecContext(ctx, scheduleTouchSQL, tick, fp.Outcome, fp.WorkerID, fp.ScheduleID); err != nil {
		return fmt.Errorf("schedule %q: record last run: %w", fp.ScheduleName, mapErr(err))
	}
	if !fp.PruneBefore.IsZero() {
		if _, err := tx.ExecContext(ctx, schedulePruneSQL, fp.ScheduleID, formatTime(fp.PruneBefore)); err != nil {
			return fmt.Errorf("schedule %q: prune run history: %w", fp.ScheduleName, mapErr(err))
		}
	}
	return nil
}

// Out: the earliest unpaused next_run (NULL: none) and the database's now.
const scheduleNextDueSQL = `SELECT min(next_run), ` + nowSQL + ` FROM stageq_schedules WHERE paused = 0`

// ScheduleNextDue implements dialect.Scheduler.
func (s *SQLite) ScheduleNextDue(ctx context.Context) (time.Duration, bool, error) {
	var next sql.NullString
	var now string
	if err := s.pool().QueryRowContext(ctx, scheduleNextDueSQL).Scan(&next, &now); err != nil {
		return 0, false, fmt.Errorf("next due schedule: %w", mapErr(err))
	}
	if !next.Valid {
		return 0, false, nil
	}
	n, err := parseTime(next.String)
	if err != nil {
		return 0, false, fmt.Errorf("next due schedule: %w", err)
	}
	t, err := parseTime(now)
	if err != nil {
		return 0, false, fmt.Errorf("next due schedule: %w", err)
	}
	return n.Sub(t), true, nil
}

// In: schedule name, limit. Out: its runs, newest first (reversed by the caller).
const scheduleRunListSQL = `
SELECT r.scheduled_for, r.outcome, coalesce(r.process_id, 0), r.task_count, r.worker_id, r.fired_at
  FROM stageq_schedule_runs r JOIN stageq_schedules s ON s.id = r.schedule_id
 WHERE s.name = ?
 ORDER BY r.scheduled_for DESC
 LIMIT ?`

// ScheduleRunList implements dialect.Scheduler.
func (s *SQLite) ScheduleRunList(ctx context.Context, f dialect.ScheduleRunFilter) ([]dialect.ScheduleRun, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.pool().QueryContext(ctx, scheduleRunListSQL, f.Name, limit)
	if err != nil {
		return nil, fmt.Errorf("list runs of schedule %q: %w", f.Name, mapErr(err))
	}
	defer rows.Close()
	var out []dialect.ScheduleRun
	for rows.Next() {
		var r dialect.ScheduleRun
		var at, fired string
		if err := rows.Scan(&at, &r.Outcome, &r.ProcessID, &r.TaskCount, &r.WorkerID, &fired); err != nil {
			return nil, fmt.Errorf("list runs of schedule %q: %w", f.Name, err)
		}
		if r.ScheduledFor, err = parseTime(at); err != nil {
			return nil, fmt.Errorf("list runs of schedule %q: %w", f.Name, err)
		}
		if r.FiredAt, err = parseTime(fired); err != nil {
			return nil, fmt.Errorf("list runs of schedule %q: %w", f.Name, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list runs of schedule %q: %w", f.Name, mapErr(err))
	}
	slices.Reverse(out) // newest first in the query (for its LIMIT), oldest first here
	return out, nil
}

// scanSchedule reads scheduleColumns through scan (a Row's or Rows' Scan, possibly
// extended with more destinations by the caller).
func scanSchedule(scan func(dest ...any) error) (dialect.ScheduleInfo, error) {
	var sc dialect.ScheduleInfo
	var intervalMS, graceMS int64
	var next string
	var lastRun, lastFired sql.NullString
	if err := scan(&sc.ID, &sc.Name, &sc.Cron, &intervalMS, &sc.Plan, &sc.Missed, &graceMS, &sc.Singleton, &sc.Paused,
		&next, &lastRun, &sc.LastOutcome, &sc.LastWorkerID, &lastFired); err != nil {
		return sc, err
	}
	sc.Interval = time.Duration(intervalMS) * time.Millisecond
	sc.Grace = time.Duration(graceMS) * time.Millisecond
	var err error
	if sc.NextRun, err = parseTime(next); err != nil {
		return sc, err
	}
	if sc.LastRun, err = parseNullTime(lastRun); err != nil {
		return sc, err
	}
	if sc.LastFiredAt, err = parseNullTime(lastFired); err != nil {
		return sc, err
	}
	return sc, nil
}

func nullMillis(d time.Duration) sql.NullInt64 {
	return sql.NullInt64{Int64: d.Milliseconds(), Valid: d > 0}
}

// oneRow turns "no row changed" into ErrNotFound.
func oneRow(res sql.Result, what string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", what, dialect.ErrNotFound)
	}
	return nil
}

// isUnique reports a UNIQUE or PRIMARY KEY violation.
func isUnique(err error) bool {
	var se *msqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// ClockNow implements dialect.Scheduler, in the stored layout's precision.
func (s *SQLite) ClockNow(ctx context.Context, tx *sql.Tx) (time.Time, error) {
	q := s.on(tx)
	var now string
	if err := q.QueryRowContext(ctx, `SELECT `+nowSQL).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", mapErr(err))
	}
	t, err := parseTime(now)
	if err != nil {
		return t, fmt.Errorf("read the database clock: %w", err)
	}
	return t, nil
}
