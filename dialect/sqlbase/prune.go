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
	// PruneAge's value, batch size. The result's rows affected are the rows
	// deleted.
	Logs, Workers, Processes string
	// Chunk, where not 0, is the most rows one of those statements deletes:
	// a larger batch goes as several statements, until one deletes fewer
	// than it was asked to (SQL Server keeps each below lock escalation).
	Chunk int
	// Record keeps the last pass in prune_status. In: worker, logs,
	// workers, processes deleted, the three retentions in seconds.
	Record string
	// Last reads it. Out: worker, ran_at, the three counts, the three
	// retentions in seconds.
	Last string
}

// prune deletes up to p.Batch rows with stmt, in statements of at most
// Retention.Chunk rows. Each is retried where the dialect retries (running it
// again deletes only rows still old; at worst a lost answer leaves a chunk
// uncounted).
func (b *Base) prune(ctx context.Context, stmt, what string, p dialect.PruneParams) (int, error) {
	if p.Age <= 0 || p.Batch <= 0 {
		return 0, fmt.Errorf("prune %s: %w: age and batch must be positive, got %s and %d", what, dialect.ErrInvalid, p.Age, p.Batch)
	}
	age, err := b.PruneAge(ctx, p.Age)
	if err != nil {
		return 0, fmt.Errorf("prune %s: %w", what, err)
	}
	chunk := p.Batch
	if b.Retention.Chunk > 0 {
		chunk = min(chunk, b.Retention.Chunk)
	}
	total := 0
	for total < p.Batch {
		n := min(p.Batch-total, chunk)
		var got int64
		err := b.onPool(ctx, true, func(ctx context.Context) error {
			var err error
			if got, err = b.execCount(ctx, b.Pool, stmt, age, n); err != nil {
				return b.MapErr(err)
			}
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("prune %s: %w", what, err)
		}
		total += int(got)
		if int(got) < n {
			break
		}
	}
	return total, nil
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
	err := b.onPool(ctx, true, func(ctx context.Context) error {
		_, err := b.Pool.ExecContext(ctx, b.Retention.Record, s.WorkerID, s.LogsDeleted, s.WorkersDeleted, s.ProcessesDeleted,
			int64(s.RetainLogs/time.Second), int64(s.RetainWorkers/time.Second), int64(s.RetainProcesses/time.Second))
		return err
	})
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
	err := b.onPool(ctx, true, func(ctx context.Context) error {
		return b.Pool.QueryRowContext(ctx, b.Retention.Last).Scan(&s.WorkerID, &ran, &s.LogsDeleted, &s.WorkersDeleted,
			&s.ProcessesDeleted, &rl, &rw, &rp)
	})
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
