package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stageq/stageq/dialect"
)

// scheduleColumns is the column list every schedule read returns, in the order
// scanSchedule expects.
const scheduleColumns = `id, name, coalesce(cron, ''), coalesce(interval_ms, 0), plan, missed, grace_ms,
       singleton, paused, next_run, last_run, coalesce(last_outcome, ''), coalesce(last_worker_id, ''), last_fired_at`

// In: name, cron (NULL for an interval), interval ms (NULL for cron), plan JSON,
// missed policy, grace ms, singleton, paused, first next_run. Out: the id.
const scheduleCreateSQL = `
INSERT INTO stageq.schedules (name, cron, interval_ms, plan, missed, grace_ms, singleton, paused, next_run)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
RETURNING id`

// ScheduleCreate implements dialect.Scheduler.
func (p *Postgres) ScheduleCreate(ctx context.Context, tx *sql.Tx, sp dialect.ScheduleCreateParams) (int64, error) {
	q := dialect.On(p.db, tx)
	var id int64
	err := q.QueryRowContext(ctx, scheduleCreateSQL, sp.Name, dialect.NullString(sp.Cron), nullMillis(sp.Interval),
		sp.Plan, sp.Missed, sp.Grace.Milliseconds(), sp.Singleton, sp.Paused, sp.NextRun).Scan(&id)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" { // unique_violation
			return 0, fmt.Errorf("create schedule %q: %w", sp.Name, dialect.ErrExists)
		}
		return 0, fmt.Errorf("create schedule %q: %w", sp.Name, mapErr(err))
	}
	return id, nil
}

// In: name (empty for all).
const scheduleListSQL = `SELECT ` + scheduleColumns + `
  FROM stageq.schedules WHERE ($1 = '' OR name = $1) ORDER BY name`

// ScheduleList implements dialect.Scheduler.
func (p *Postgres) ScheduleList(ctx context.Context, f dialect.ScheduleFilter) ([]dialect.ScheduleInfo, error) {
	rows, err := p.db.QueryContext(ctx, scheduleListSQL, f.Name)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", mapErr(err))
	}
	defer rows.Close()
	var out []dialect.ScheduleInfo
	for rows.Next() {
		s, err := scanSchedule(rows.Scan)
		if err != nil {
			return nil, fmt.Errorf("list schedules: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// In: name, paused.
const schedulePauseSQL = `UPDATE stageq.schedules SET paused = $2, updated_at = now() WHERE name = $1`

// ScheduleSetPaused implements dialect.Scheduler.
func (p *Postgres) ScheduleSetPaused(ctx context.Context, sp dialect.SchedulePauseParams) error {
	res, err := p.db.ExecContext(ctx, schedulePauseSQL, sp.Name, sp.Paused)
	if err != nil {
		return fmt.Errorf("pause schedule %q: %w", sp.Name, mapErr(err))
	}
	return oneRow(res, "schedule "+sp.Name)
}

const scheduleDeleteSQL = `DELETE FROM stageq.schedules WHERE name = $1`

// ScheduleDelete implements dialect.Scheduler.
func (p *Postgres) ScheduleDelete(ctx context.Context, name string) error {
	res, err := p.db.ExecContext(ctx, scheduleDeleteSQL, name)
	if err != nil {
		return fmt.Errorf("delete schedule %q: %w", name, mapErr(err))
	}
	return oneRow(res, "schedule "+name)
}

// scheduleLockDueSQL locks the earliest due schedule no one else holds. SKIP
// LOCKED lets racing workers pass over it instead of queueing behind it; a row
// another worker advanced and committed meanwhile is re-checked against next_run
// <= now() and drops out. Out: the schedule and the database's now.
const scheduleLockDueSQL = `SELECT ` + scheduleColumns + `, now()
  FROM stageq.schedules
 WHERE NOT paused AND next_run <= now()
 ORDER BY next_run
 LIMIT 1
   FOR UPDATE SKIP LOCKED`

// ScheduleLockDue implements dialect.Scheduler.
func (p *Postgres) ScheduleLockDue(ctx context.Context, tx *sql.Tx) (dialect.ScheduleInfo, time.Time, bool, error) {
	var now time.Time
	s, err := scanSchedule(func(dest ...any) error {
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

// In: name. Out: the schedule and the database's now; waits for other holders.
const scheduleLockSQL = `SELECT ` + scheduleColumns + `, now()
  FROM stageq.schedules WHERE name = $1 FOR UPDATE`

// ScheduleLock implements dialect.Scheduler.
func (p *Postgres) ScheduleLock(ctx context.Context, tx *sql.Tx, name string) (dialect.ScheduleInfo, time.Time, error) {
	var now time.Time
	s, err := scanSchedule(func(dest ...any) error {
		return tx.QueryRowContext(ctx, scheduleLockSQL, name).Scan(append(dest, &now)...)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return s, now, fmt.Errorf("schedule %q: %w", name, dialect.ErrNotFound)
	}
	if err != nil {
		return s, now, fmt.Errorf("lock schedule %q: %w", name, mapErr(err))
	}
	return s, now, nil
}

// A seek on tasks_schedule.
const scheduleUnfinishedSQL = `SELECT EXISTS (SELECT 1 FROM stageq.tasks WHERE schedule_name = $1)`

// ScheduleUnfinished implements dialect.Scheduler.
func (p *Postgres) ScheduleUnfinished(ctx context.Context, tx *sql.Tx, name string) (bool, error) {
	var exists bool
	if err := tx.QueryRowContext(ctx, scheduleUnfinishedSQL, name).Scan(&exists); err != nil {
		return false, fmt.Errorf("schedule %q: unfinished runs: %w", name, mapErr(err))
	}
	return exists, nil
}

const (
	// In: schedule name, tick, task ids.
	scheduleTagSQL = `
UPDATE stageq.tasks SET schedule_name = $1, scheduled_for = $2 WHERE id = ANY($3::bigint[])`
	// In: schedule id, tick, outcome, process id (NULL: none), task count, worker.
	scheduleRunSQL = `
INSERT INTO stageq.schedule_runs (schedule_id, scheduled_for, outcome, process_id, task_count, worker_id)
VALUES ($1, $2, $3, $4, $5, $6)`
	// In: schedule id, next_run read under the lock, new next_run, tick, outcome,
	// worker. The next_run predicate is a second fence behind the row lock.
	scheduleAdvanceSQL = `
UPDATE stageq.schedules
   SET next_run = $3, last_run = $4, last_outcome = $5, last_worker_id = $6, last_fired_at = now(),
       updated_at = now()
 WHERE id = $1 AND next_run = $2`
	// In: schedule id, tick, outcome, worker. run-now leaves next_run alone.
	scheduleTouchSQL = `
UPDATE stageq.schedules
   SET last_run = $2, last_outcome = $3, last_worker_id = $4, last_fired_at = now(), updated_at = now()
 WHERE id = $1`
	// In: schedule id, cut-off. A seek on the primary key.
	schedulePruneSQL = `DELETE FROM stageq.schedule_runs WHERE schedule_id = $1 AND scheduled_for < $2`
)

// ScheduleFire implements dialect.Scheduler.
func (p *Postgres) ScheduleFire(ctx context.Context, tx *sql.Tx, fp dialect.ScheduleFireParams) error {
	if len(fp.TaskIDs) > 0 {
		if _, err := tx.ExecContext(ctx, scheduleTagSQL, fp.ScheduleName, fp.ScheduledFor, fp.TaskIDs); err != nil {
			return fmt.Errorf("schedule %q: tag tasks: %w", fp.ScheduleName, mapErr(err))
		}
	}
	var pid sql.NullInt64
	if fp.ProcessID != 0 {
		pid = sql.NullInt64{Int64: fp.ProcessID, Valid: true}
	}
	if _, err := tx.ExecContext(ctx, scheduleRunSQL, fp.ScheduleID, fp.ScheduledFor, fp.Outcome, pid,
		len(fp.TaskIDs), fp.WorkerID); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return fmt.Errorf("schedule %q: tick %s: %w", fp.ScheduleName, fp.ScheduledFor.Format(time.RFC3339Nano), dialect.ErrConflict)
		}
		return fmt.Errorf("schedule %q: record run: %w", fp.ScheduleName, mapErr(err))
	}
	if fp.Advance {
		res, err := tx.ExecContext(ctx, scheduleAdvanceSQL, fp.ScheduleID, fp.PrevNextRun, fp.NextRun,
			fp.ScheduledFor, fp.Outcome, fp.WorkerID)
		if err != nil {
			return fmt.Errorf("schedule %q: advance: %w", fp.ScheduleName, mapErr(err))
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("schedule %q: advance from %s: %w", fp.ScheduleName, fp.PrevNextRun.Format(time.RFC3339Nano), dialect.ErrConflict)
		}
	} else if _, err := tx.ExecContext(ctx, scheduleTouchSQL, fp.ScheduleID, fp.ScheduledFor, fp.Outcome, fp.WorkerID); err != nil {
		return fmt.Errorf("schedule %q: record last run: %w", fp.ScheduleName, mapErr(err))
	}
	if !fp.PruneBefore.IsZero() {
		if _, err := tx.ExecContext(ctx, schedulePruneSQL, fp.ScheduleID, fp.PruneBefore); err != nil {
			return fmt.Errorf("schedule %q: prune run history: %w", fp.ScheduleName, mapErr(err))
		}
	}
	return nil
}

// Out: ms until the earliest unpaused next_run (NULL: none). A seek on schedules_due.
const scheduleNextDueSQL = `
SELECT (extract(epoch FROM min(next_run) - now()) * 1000)::bigint
  FROM stageq.schedules WHERE NOT paused`

// ScheduleNextDue implements dialect.Scheduler.
func (p *Postgres) ScheduleNextDue(ctx context.Context) (time.Duration, bool, error) {
	var ms sql.NullInt64
	if err := p.db.QueryRowContext(ctx, scheduleNextDueSQL).Scan(&ms); err != nil {
		return 0, false, fmt.Errorf("next due schedule: %w", mapErr(err))
	}
	return time.Duration(ms.Int64) * time.Millisecond, ms.Valid, nil
}

// In: schedule name, limit. Out: its runs, newest first (reversed by the caller).
const scheduleRunListSQL = `
SELECT r.scheduled_for, r.outcome, coalesce(r.process_id, 0), r.task_count, r.worker_id, r.fired_at
  FROM stageq.schedule_runs r JOIN stageq.schedules s ON s.id = r.schedule_id
 WHERE s.name = $1
 ORDER BY r.scheduled_for DESC
 LIMIT $2`

// ScheduleRunList implements dialect.Scheduler.
func (p *Postgres) ScheduleRunList(ctx context.Context, f dialect.ScheduleRunFilter) ([]dialect.ScheduleRun, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 1 << 30
	}
	rows, err := p.db.QueryContext(ctx, scheduleRunListSQL, f.Name, limit)
	if err != nil {
		return nil, fmt.Errorf("list runs of schedule %q: %w", f.Name, mapErr(err))
	}
	defer rows.Close()
	var out []dialect.ScheduleRun
	for rows.Next() {
		var r dialect.ScheduleRun
		if err := rows.Scan(&r.ScheduledFor, &r.Outcome, &r.ProcessID, &r.TaskCount, &r.WorkerID, &r.FiredAt); err != nil {
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
	var s dialect.ScheduleInfo
	var intervalMS, graceMS int64
	var lastRun, lastFired sql.NullTime
	if err := scan(&s.ID, &s.Name, &s.Cron, &intervalMS, &s.Plan, &s.Missed, &graceMS, &s.Singleton, &s.Paused,
		&s.NextRun, &lastRun, &s.LastOutcome, &s.LastWorkerID, &lastFired); err != nil {
		return s, err
	}
	s.Interval = time.Duration(intervalMS) * time.Millisecond
	s.Grace = time.Duration(graceMS) * time.Millisecond
	if lastRun.Valid {
		s.LastRun = &lastRun.Time
	}
	if lastFired.Valid {
		s.LastFiredAt = &lastFired.Time
	}
	return s, nil
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

// ClockNow implements dialect.Scheduler: the transaction's now, the same clock
// every schedule and lease statement compares with.
func (p *Postgres) ClockNow(ctx context.Context, tx *sql.Tx) (time.Time, error) {
	q := dialect.On(p.db, tx)
	var now time.Time
	if err := q.QueryRowContext(ctx, `SELECT now()`).Scan(&now); err != nil {
		return now, fmt.Errorf("read the database clock: %w", mapErr(err))
	}
	return now, nil
}
