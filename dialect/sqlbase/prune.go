package sqlbase

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stageq/stageq/dialect"
)

// RetentionStatements are a dialect's texts for pruning old rows.
type RetentionStatements struct {
	// Logs, Workers and Processes each delete one batch. In:
	// PruneAge's value, batch size.
	Logs, Workers, Processes string
	// Record keeps the last pass in prune_status. In: worker, logs,
	// workers, processes deleted, the three retentions in seconds.
	Record string
	// Last reads it. Out: worker, ran_at, the three counts, the three
	// retentions in seconds.
	Last string
}

func (b *Base) prune(ctx context.Context, stmt, what string, p dialect.PruneParams) (int, error) {
	age, err := b.PruneAge(ctx, p.Age)
	if err != nil {
		return 0, fmt.Errorf("prune %s: %w", what, err)
	}
	res, err := b.Pool.ExecContext(ctx, stmt, age, p.Batch)
	if err != nil {
		return 0, fmt.Errorf("prune %s: %w", what, b.MapErr(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("prune %s: %w", what, err)
	}
	return int(n), nil
}

// PruneLogs implements dialect.Pruner.
func (b *Base) PruneLogs(ctx context.Context, p dialect.PruneParams) (int, error) {
	return b.prune(ctx, b.Retention.Logs, "logs", p)
}

// PruneWorkers implements dialect.Pruner.
func (b *Base) PruneWorkers(ctx context.Context, p dialect.PruneParams) (int, error) {
	return b.prune(ctx, b.Retention.Workers, "workers", p)
}

// PruneProcesses implements dialect.Pruner.
func (b *Base) PruneProcesses(ctx context.Context, p dialect.PruneParams) (int, error) {
	return b.prune(ctx, b.Retention.Processes, "processes", p)
}

// PruneRecord implements dialect.Pruner.
func (b *Base) PruneRecord(ctx context.Context, s dialect.PruneStatus) error {
	_, err := b.Pool.ExecContext(ctx, b.Retention.Record, s.WorkerID, s.LogsDeleted, s.WorkersDeleted, s.ProcessesDeleted,
		int64(s.RetainLogs/time.Second), int64(s.RetainWorkers/time.Second), int64(s.RetainProcesses/time.Second))
	if err != nil {
		return fmt.Errorf("record prune pass: %w", b.MapErr(err))
	}
	return nil
}

// PruneLast implements dialect.Pruner.
func (b *Base) PruneLast(ctx context.Context) (dialect.PruneStatus, bool, error) {
	var s dialect.PruneStatus
	var ran dialect.TimeScan
	var rl, rw, rp int64
	err := b.Pool.QueryRowContext(ctx, b.Retention.Last).Scan(&s.WorkerID, &ran, &s.LogsDeleted, &s.WorkersDeleted,
		&s.ProcessesDeleted, &rl, &rw, &rp)
	if errors.Is(err, sql.ErrNoRows) {
		return s, false, nil
	}
	if err != nil {
		return s, false, fmt.Errorf("read prune status: %w", b.MapErr(err))
	}
	s.RanAt = ran.Time
	s.RetainLogs, s.RetainWorkers, s.RetainProcesses = time.Duration(rl)*time.Second, time.Duration(rw)*time.Second, time.Duration(rp)*time.Second
	return s, true, nil
}
