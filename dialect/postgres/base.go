package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/dialect/sqlbase"
)

// base gives sqlbase the statements of operate.go, read.go, limits.go,
// prune.go, schedule.go and exclusive_lease.go and the steps PostgreSQL takes its own way.
func (p *Postgres) base() sqlbase.Base {
	return sqlbase.Base{
		Pool:   p.db,
		InTx:   p.inTx,
		MapErr: mapErr,
		Time:   func(t time.Time) any { return t },
		OpenStage: func(ctx context.Context, q dialect.Querier, id int64) error {
			if _, err := q.ExecContext(ctx, p.calls.SQL(openStageSQL), id); err != nil {
				return mapErr(err)
			}
			return nil
		},
		Configure: func(ctx context.Context, q dialect.Querier, id int64, s dialect.ProcessSettings) error {
			_, err := q.ExecContext(ctx, p.calls.SQL(configureSQL), id,
				dialect.NullInt(s.Priority), dialect.NullInt(s.Weight), dialect.NullInt(s.MaxParallel))
			if err != nil {
				return mapErr(err)
			}
			return nil
		},
		PruneAge: func(_ context.Context, age time.Duration) (any, error) { return age.Milliseconds(), nil },
		IsUnique: isUnique,
		IDs:      func(ids []int64) (any, error) { return ids, nil },
		Interval: func(d time.Duration) any { return d.Milliseconds() },
		SQL: sqlbase.Statements{
			LockProcess:     lockProcessSQL,
			LockProcessByID: lockProcessByIDSQL,
			Pause:           pauseSQL,
			AuditFailed:     auditProcessSQL,
			RetryProcess:    retryProcessSQL,
			DiscardProcess:  discardProcessSQL,
			CancelProcess:   cancelProcessSQL,
			Running:         runningProcessSQL,
			TaskProcess:     taskProcessSQL,
			TaskLock:        taskLockSQL,
			AuditTask:       auditTaskSQL,
			RetryTask:       retryTaskSQL,
			DeleteTask:      deleteTaskSQL,
			ProcessList:     processListSQL,
			StageCount:      stageCountSQL,
			StageDone:       stageDoneSQL,
			WorkerList:      workerListSQL,
			LogList:         logListSQL,
			LogListNewest:   logListNewestSQL,
			TaskList:        taskListSQL,
			ProcessGet:      processGetSQL,
		},
		Limits: limitSQL, Retention: retentionSQL, Schedule: scheduleSQL, Lease: leaseSQL,
	}
}

// inTx runs fn in the caller's transaction tx, or (tx nil) in a new one that
// commits when fn succeeds.
func (p *Postgres) inTx(ctx context.Context, tx *sql.Tx, fn func(dialect.Querier) error) error {
	if tx != nil {
		return fn(tx)
	}
	tx, err := p.BeginTx(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", mapErr(err))
	}
	return nil
}

// isUnique reports a unique_violation (23505).
func isUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}
