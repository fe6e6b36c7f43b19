package sqlbase

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stageq/stageq/dialect"
)

// noLimit stands for "every row" in the LIMIT of a read.
const noLimit = 1 << 30

// LogList implements dialect.Dialect.
func (b *Base) LogList(ctx context.Context, f dialect.LogFilter) ([]dialect.LogEntry, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = noLimit
	}
	since := f.Since
	if since.IsZero() {
		since = time.Unix(0, 0)
	}
	out, err := dialect.QueryAll(ctx, b.Pool, b.MapErr, b.SQL.LogList, func(r *sql.Rows, e *dialect.LogEntry) error {
		var started, ended, retry dialect.TimeScan
		var outcome string
		if err := r.Scan(&e.ID, &e.TaskID, &e.ProcessID, &e.Process, &e.Order, &e.Kind, &e.Body,
			&e.WorkerID, &e.Attempt, &started, &ended, &outcome, &e.Error, &retry, &e.Schedule); err != nil {
			return err
		}
		e.Outcome, e.StartedAt, e.EndedAt, e.RetryAt = dialect.Outcome(outcome), started.Time, ended.Ptr(), retry.Ptr()
		return nil
	}, f.Process, f.TaskID, f.WorkerID, string(f.Outcome), b.Time(since), limit)
	if err != nil {
		return nil, fmt.Errorf("list logs: %w", err)
	}
	return out, nil
}

// TaskList implements dialect.Dialect.
func (b *Base) TaskList(ctx context.Context, f dialect.TaskFilter) ([]dialect.TaskInfo, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = noLimit
	}
	out, err := dialect.QueryAll(ctx, b.Pool, b.MapErr, b.SQL.TaskList, func(r *sql.Rows, t *dialect.TaskInfo) error {
		var runAt dialect.TimeScan
		if err := r.Scan(&t.ID, &t.Process, &t.Order, &t.Kind, &t.Body, &t.State, &t.Attempt,
			&t.MaxAttempts, &t.Priority, &runAt, &t.WorkerID, &t.LastError); err != nil {
			return err
		}
		t.RunAt = runAt.Time
		return nil
	}, f.Process, f.State, limit)
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	return out, nil
}

// ProcessGet implements dialect.Dialect.
func (b *Base) ProcessGet(ctx context.Context, name string) (dialect.ProcessInfo, error) {
	var pi dialect.ProcessInfo
	var cur sql.NullInt64
	err := b.Pool.QueryRowContext(ctx, b.SQL.ProcessGet, name).Scan(&pi.ID, &pi.Name, &pi.State, &cur)
	if errors.Is(err, sql.ErrNoRows) {
		return pi, fmt.Errorf("process %q: %w", name, dialect.ErrNotFound)
	}
	if err != nil {
		return pi, fmt.Errorf("get process %q: %w", name, b.MapErr(err))
	}
	if cur.Valid {
		c := int(cur.Int64)
		pi.CurrentOrder = &c
	}
	return pi, nil
}
