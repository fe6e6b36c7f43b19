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
	out, err := dialect.QueryAll(ctx, b.Pool, b.MapErr, b.SQL.LogList, dialect.ScanLogEntry,
		f.Process, f.TaskID, f.WorkerID, string(f.Outcome), b.Time(since), limit)
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
	out, err := dialect.QueryAll(ctx, b.Pool, b.MapErr, b.SQL.TaskList, dialect.ScanTaskInfo,
		f.Process, f.State, limit)
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
