package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stageq/stageq/dialect"
)

// logListSQL reads Logs oldest first; empty filters match everything.
// In: process, task, worker, outcome, since, limit.
const logListSQL = `
SELECT id, task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt,
       started_at, ended_at, outcome, coalesce(error, ''), retry_at, coalesce(schedule_name, '')
  FROM stageq_logs
 WHERE (?1 = '' OR process_name = ?1)
   AND (?2 = 0 OR task_id = ?2)
   AND (?3 = '' OR worker_id = ?3)
   AND (?4 = '' OR outcome = ?4)
   AND started_at >= ?5
 ORDER BY started_at, id
 LIMIT ?6`

// LogList implements dialect.Dialect.
func (s *SQLite) LogList(ctx context.Context, f dialect.LogFilter) ([]dialect.LogEntry, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	since := ""
	if !f.Since.IsZero() {
		since = formatTime(f.Since)
	}
	rows, err := s.pool().QueryContext(ctx, logListSQL, f.Process, f.TaskID, f.WorkerID, string(f.Outcome), since, limit)
	if err != nil {
		return nil, fmt.Errorf("list logs: %w", mapErr(err))
	}
	defer rows.Close()
	var out []dialect.LogEntry
	for rows.Next() {
		var e dialect.LogEntry
		var started, outcome string
		var ended, retry sql.NullString
		if err := rows.Scan(&e.ID, &e.TaskID, &e.ProcessID, &e.Process, &e.Order, &e.Kind, &e.Body,
			&e.WorkerID, &e.Attempt, &started, &ended, &outcome, &e.Error, &retry, &e.Schedule); err != nil {
			return nil, fmt.Errorf("list logs: %w", err)
		}
		e.Outcome = dialect.Outcome(outcome)
		if e.StartedAt, err = parseTime(started); err != nil {
			return nil, fmt.Errorf("list logs: %w", err)
		}
		if e.EndedAt, err = parseNullTime(ended); err != nil {
			return nil, fmt.Errorf("list logs: %w", err)
		}
		if e.RetryAt, err = parseNullTime(retry); err != nil {
			return nil, fmt.Errorf("list logs: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

func parseNullTime(s sql.NullString) (*time.Time, error) {
	if !s.Valid {
		return nil, nil
	}
	t, err := parseTime(s.String)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// In: process, state, limit.
const taskListSQL = `
SELECT t.id, p.name, t.execution_order, t.kind, t.body, t.state, t.attempt, t.max_attempts,
       t.priority, t.run_at, coalesce(t.worker_id, ''), coalesce(t.last_error, '')
  FROM stageq_tasks t JOIN stageq_processes p ON p.id = t.process_id
 WHERE (?1 = '' OR p.name = ?1)
   AND (?2 = '' OR t.state = ?2)
 ORDER BY p.name, t.execution_order, t.id
 LIMIT ?3`

// TaskList implements dialect.Dialect.
func (s *SQLite) TaskList(ctx context.Context, f dialect.TaskFilter) ([]dialect.TaskInfo, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.pool().QueryContext(ctx, taskListSQL, f.Process, f.State, limit)
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", mapErr(err))
	}
	defer rows.Close()
	var out []dialect.TaskInfo
	for rows.Next() {
		var t dialect.TaskInfo
		var runAt string
		if err := rows.Scan(&t.ID, &t.Process, &t.Order, &t.Kind, &t.Body, &t.State, &t.Attempt,
			&t.MaxAttempts, &t.Priority, &runAt, &t.WorkerID, &t.LastError); err != nil {
			return nil, fmt.Errorf("list tasks: %w", err)
		}
		if t.RunAt, err = parseTime(runAt); err != nil {
			return nil, fmt.Errorf("list tasks: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

const processGetSQL = `SELECT id, name, state, current_order FROM stageq_processes WHERE name = ?`

// ProcessGet implements dialect.Dialect.
func (s *SQLite) ProcessGet(ctx context.Context, name string) (dialect.ProcessInfo, error) {
	var pi dialect.ProcessInfo
	var cur sql.NullInt64
	err := s.pool().QueryRowContext(ctx, processGetSQL, name).Scan(&pi.ID, &pi.Name, &pi.State, &cur)
	if errors.Is(err, sql.ErrNoRows) {
		return pi, fmt.Errorf("process %q: %w", name, dialect.ErrNotFound)
	}
	if err != nil {
		return pi, fmt.Errorf("get process %q: %w", name, mapErr(err))
	}
	if cur.Valid {
		c := int(cur.Int64)
		pi.CurrentOrder = &c
	}
	return pi, nil
}
