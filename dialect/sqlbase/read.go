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

// rowLimit is a read's LIMIT: n, or every row (1<<30) when n is 0 or less.
func rowLimit(n int) int {
	if n <= 0 {
		return 1 << 30
	}
	return n
}

// LogList implements dialect.Dialect.
func (b *Base) LogList(ctx context.Context, f dialect.LogFilter) ([]dialect.LogEntry, error) {
	since := f.Since
	if since.IsZero() {
		since = time.Unix(0, 0)
	}
	stmt := b.SQL.LogList
	if f.Newest {
		stmt = b.SQL.LogListNewest
	}
	out, err := list(ctx, b, "logs", stmt, dialect.ScanLogEntry,
		f.Process, f.TaskID, f.WorkerID, string(f.Outcome), b.Time(since), rowLimit(f.Limit), f.AfterID, f.ProcessID)
	if f.Newest {
		slices.Reverse(out)
	}
	return out, err
}

// TaskList implements dialect.Dialect.
func (b *Base) TaskList(ctx context.Context, f dialect.TaskFilter) ([]dialect.TaskInfo, error) {
	return list(ctx, b, "tasks", b.SQL.TaskList, dialect.ScanTaskInfo, f.Process, f.State, rowLimit(f.Limit), f.Kind)
}

// ProcessGet implements dialect.Dialect.
func (b *Base) ProcessGet(ctx context.Context, name string) (dialect.ProcessInfo, error) {
	var pi dialect.ProcessInfo
	var cur sql.NullInt64
	err := b.onPool(ctx, true, func(ctx context.Context) error {
		return b.Pool.QueryRowContext(ctx, b.SQL.ProcessGet, name).Scan(&pi.ID, &pi.Name, &pi.State, &cur)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return pi, fmt.Errorf("process %q: %w", name, dialect.ErrNotFound)
	}
	if err != nil {
		return pi, fmt.Errorf("get process %q: %w", name, b.MapErr(err))
	}
	pi.CurrentOrder = dialect.IntOrNil(cur)
	return pi, nil
}
