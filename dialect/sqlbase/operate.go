package sqlbase

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// withProcess locks the named process in a transaction and runs fn with its id;
// afterwards it re-derives the process's stage. A removal that emptied the
// process ends it there: OpenStage ends it cancelled when an operator's row
// is its newest in Logs (the audit rows fn wrote).
func (b *Base) withProcess(ctx context.Context, tx *sql.Tx, name string, fn func(q dialect.Querier, id int64) error) error {
	return b.InTx(ctx, tx, func(q dialect.Querier) error {
		var id int64
		err := q.QueryRowContext(ctx, b.SQL.LockProcess, name).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("process %q: %w", name, dialect.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("lock process %q: %w", name, b.MapErr(err))
		}
		if err := fn(q, id); err != nil {
			return err
		}
		if err := b.OpenStage(ctx, q, id); err != nil {
			return fmt.Errorf("process %q: open stage: %w", name, err)
		}
		return nil
	})
}

// audit runs one of the audit statements, whose parameters are always the
// changed row's id, who, outcome and note.
func (b *Base) audit(ctx context.Context, q dialect.Querier, stmt string, id int64, o dialect.Outcome) error {
	if _, err := q.ExecContext(ctx, stmt, id, b.who(ctx), string(o), dialect.AuditNote(o)); err != nil {
		return fmt.Errorf("audit: %w", b.MapErr(err))
	}
	return nil
}

// ProcessConfigure implements dialect.Operator.
func (b *Base) ProcessConfigure(ctx context.Context, tx *sql.Tx, name string, s dialect.ProcessSettings) error {
	if err := dialect.ValidateSettings(s); err != nil {
		return fmt.Errorf("configure process %q: %w", name, err)
	}
	return b.withProcess(ctx, tx, name, func(q dialect.Querier, id int64) error {
		if err := b.Configure(ctx, q, id, s); err != nil {
			return fmt.Errorf("configure process %q: %w", name, err)
		}
		// A raised or removed max_parallel may admit tasks that idle workers
		// last found held back: without a wake they would wait for their
		// next poll (up to --poll-max), while a raised named limit wakes them.
		if s.MaxParallel != nil && b.Limits.Wake != "" {
			if _, err := q.ExecContext(ctx, b.Limits.Wake); err != nil {
				return fmt.Errorf("configure process %q: wake workers: %w", name, b.MapErr(err))
			}
		}
		return nil
	})
}

// ProcessSetPaused implements dialect.Operator.
func (b *Base) ProcessSetPaused(ctx context.Context, name string, paused bool) error {
	return b.withProcess(ctx, nil, name, func(q dialect.Querier, id int64) error {
		if _, err := q.ExecContext(ctx, b.SQL.Pause, id, paused); err != nil {
			return fmt.Errorf("pause process %q: %w", name, b.MapErr(err))
		}
		return nil
	})
}

// processBulk audits and runs one bulk statement on the failed tasks of a
// locked process, and insists it changed something, so that a command with
// nothing to do says so.
func (b *Base) processBulk(ctx context.Context, name, stmt, what string, o dialect.Outcome) (int, error) {
	var n int64
	err := b.withProcess(ctx, nil, name, func(q dialect.Querier, id int64) error {
		if err := b.audit(ctx, q, b.SQL.AuditFailed, id, o); err != nil {
			return fmt.Errorf("%s process %q: %w", what, name, err)
		}
		var err error
		if n, err = b.execCount(ctx, q, stmt, id); err != nil {
			return fmt.Errorf("%s process %q: %w", what, name, b.MapErr(err))
		}
		if n == 0 {
			return fmt.Errorf("%s process %q: %w: it has no failed tasks", what, name, dialect.ErrWrongState)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return int(n), nil
}

// ProcessRetry implements dialect.Operator.
func (b *Base) ProcessRetry(ctx context.Context, name string) (int, error) {
	return b.processBulk(ctx, name, b.SQL.RetryProcess, "retry", dialect.OutcomeRetried)
}

// ProcessDiscard implements dialect.Operator.
func (b *Base) ProcessDiscard(ctx context.Context, name string) (int, error) {
	return b.processBulk(ctx, name, b.SQL.DiscardProcess, "discard", dialect.OutcomeDiscarded)
}

// ProcessCancel implements dialect.Operator.
func (b *Base) ProcessCancel(ctx context.Context, name string) (removed, running int, err error) {
	o := dialect.OutcomeCancelled
	err = b.withProcess(ctx, nil, name, func(q dialect.Querier, id int64) error {
		args := []any{id, b.who(ctx), string(o), dialect.AuditNote(o)}
		if b.SQL.AuditCancel != "" {
			if err := b.audit(ctx, q, b.SQL.AuditCancel, id, o); err != nil {
				return fmt.Errorf("cancel process %q: %w", name, err)
			}
			args = args[:1]
		}
		n, err := b.execCount(ctx, q, b.SQL.CancelProcess, args...)
		if err != nil {
			return fmt.Errorf("cancel process %q: %w", name, b.MapErr(err))
		}
		removed = int(n)
		if err := q.QueryRowContext(ctx, b.SQL.Running, id).Scan(&running); err != nil {
			return fmt.Errorf("cancel process %q: %w", name, b.MapErr(err))
		}
		if removed == 0 {
			return fmt.Errorf("cancel process %q: %w: it has no waiting or failed tasks (%d running)", name, dialect.ErrWrongState, running)
		}
		return nil
	})
	return removed, running, err
}

// withTask locks a task's process, then the task, checks its state with allow,
// audits and runs stmt; then it re-derives the process's stage. requeue says
// that stmt puts the task back in the queue, which is refused when its
// process row is gone: no stage of it can open again, and open_stage has no
// process to stamp. Any other command on such a task only removes it.
func (b *Base) withTask(ctx context.Context, id int64, allow func(state, worker string) error, stmt string, o dialect.Outcome, requeue bool) error {
	return b.InTx(ctx, nil, func(q dialect.Querier) error {
		var pid int64
		err := q.QueryRowContext(ctx, b.SQL.TaskProcess, id).Scan(&pid)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("task %d: %w (finished tasks leave the queue; see logs)", id, dialect.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("task %d: %w", id, b.MapErr(err))
		}
		var held int64
		err = q.QueryRowContext(ctx, b.SQL.LockProcessByID, pid).Scan(&held)
		gone := errors.Is(err, sql.ErrNoRows)
		if err != nil && !gone {
			return fmt.Errorf("task %d: lock process: %w", id, b.MapErr(err))
		}
		var state, worker string
		err = q.QueryRowContext(ctx, b.SQL.TaskLock, id).Scan(&state, &worker)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("task %d: %w (it finished meanwhile)", id, dialect.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("task %d: %w", id, b.MapErr(err))
		}
		if err := allow(state, worker); err != nil {
			return fmt.Errorf("task %d: %w", id, err)
		}
		if gone && requeue {
			return fmt.Errorf("task %d: %w: its process (id %d) no longer exists, its row deleted by hand, so the task "+
				"could never run again; discard or cancel it to remove it", id, dialect.ErrWrongState, pid)
		}
		if err := b.audit(ctx, q, b.SQL.AuditTask, id, o); err != nil {
			return fmt.Errorf("task %d: %w", id, err)
		}
		if _, err := q.ExecContext(ctx, stmt, id); err != nil {
			return fmt.Errorf("task %d: %w", id, b.MapErr(err))
		}
		if gone {
			return nil
		}
		if err := b.OpenStage(ctx, q, pid); err != nil {
			return fmt.Errorf("task %d: open stage: %w", id, err)
		}
		return nil
	})
}

// TaskRetry implements dialect.Operator.
func (b *Base) TaskRetry(ctx context.Context, id int64) error {
	return b.withTask(ctx, id, dialect.AllowRetry, b.SQL.RetryTask, dialect.OutcomeRetried, true)
}

// TaskDiscard implements dialect.Operator.
func (b *Base) TaskDiscard(ctx context.Context, id int64) error {
	return b.withTask(ctx, id, dialect.AllowDiscard, b.SQL.DeleteTask, dialect.OutcomeDiscarded, false)
}

// TaskCancel implements dialect.Operator.
func (b *Base) TaskCancel(ctx context.Context, id int64) error {
	return b.withTask(ctx, id, dialect.AllowCancel, b.SQL.DeleteTask, dialect.OutcomeCancelled, false)
}

// ProcessList implements dialect.Operator.
func (b *Base) ProcessList(ctx context.Context, f dialect.ProcessFilter) ([]dialect.ProcessStatus, error) {
	var out []dialect.ProcessStatus
	err := b.onPool(ctx, true, func(ctx context.Context) (err error) {
		out, err = dialect.CollectProcessStatus(ctx, b.Pool, f, b.SQL.ProcessList, b.SQL.StageCount, b.SQL.StageDone, b.MapErr)
		return err
	})
	return out, err
}

// WorkerList implements dialect.Operator.
func (b *Base) WorkerList(ctx context.Context) ([]dialect.WorkerStatus, error) {
	return list(ctx, b, "workers", b.SQL.WorkerList, dialect.ScanWorkerStatus)
}
