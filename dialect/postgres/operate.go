package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

var _ dialect.Operator = (*Postgres)(nil)

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

// Operator statements. Each one that changes tasks runs after lockProcessSQL (or
// lockProcessByIDSQL) in the same transaction: the process row first, then task
// rows, the order finish, submit, rescue and the claim all keep.
const (
	lockProcessSQL     = `SELECT id FROM stageq.processes WHERE name = $1 FOR UPDATE`
	lockProcessByIDSQL = `SELECT id FROM stageq.processes WHERE id = $1 FOR UPDATE`
	openStageSQL       = `SELECT stageq_routines.open_stage($1)`

	// In: id, priority, weight, max_parallel (NULL: unchanged; 0: no cap);
	// configure (routines/postgres/20_submit.sql) also passes a new priority or weight on to the tasks
	// already waiting.
	configureSQL = `SELECT stageq_routines.configure($1, $2, $3, $4)`

	pauseSQL = `UPDATE stageq.processes SET paused = $2, updated_at = now() WHERE id = $1`

	// A retried task starts over with fresh attempts. It waits blocked until
	// open_stage (run next, in the same transaction) makes it available
	// and stamps its turn, when its stage is the open one. In: process id.
	retryProcessSQL = `
UPDATE stageq.tasks SET state = 'blocked', attempt = 0, abandons = 0, run_at = now()
 WHERE process_id = $1 AND state = 'failed'`
	discardProcessSQL = `DELETE FROM stageq.tasks WHERE process_id = $1 AND state = 'failed'`
	// The cancel removes and audits in one statement: a claim may take an
	// available task at any moment (claims lock no process row), and a task it
	// took between an audit statement and a DELETE would be recorded cancelled
	// yet run. The DELETE's RETURNING is exactly what went. In: process id,
	// who, outcome, note.
	cancelProcessSQL = `
WITH gone AS (
    DELETE FROM stageq.tasks WHERE process_id = $1 AND state <> 'running'
    RETURNING id, process_id, execution_order, kind, body, attempt, schedule_name, scheduled_for
)
INSERT INTO stageq.logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt,
                         lease_token, started_at, ended_at, duration_ms, outcome, error, schedule_name, scheduled_for)
SELECT g.id, g.process_id, p.name, g.execution_order, g.kind, g.body, $2, g.attempt,
       0, now(), now(), 0, $3, $4, g.schedule_name, g.scheduled_for
  FROM gone g JOIN stageq.processes p ON p.id = g.process_id`
	runningProcessSQL = `SELECT count(*) FROM stageq.tasks WHERE process_id = $1 AND state = 'running'`

	taskProcessSQL = `SELECT process_id FROM stageq.tasks WHERE id = $1`
	taskLockSQL    = `SELECT state, coalesce(worker_id, '') FROM stageq.tasks WHERE id = $1 FOR UPDATE`
	retryTaskSQL   = `UPDATE stageq.tasks SET state = 'blocked', attempt = 0, abandons = 0, run_at = now() WHERE id = $1`
	deleteTaskSQL  = `DELETE FROM stageq.tasks WHERE id = $1`

	// Operator actions leave a Logs row per task they change, written before the
	// change under the same locks (failed tasks change only under their
	// process's lock, so none can slip between the two). In: process id (or
	// task id), who, outcome, note.
	auditProcessSQL = `
INSERT INTO stageq.logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt,
                         lease_token, started_at, ended_at, duration_ms, outcome, error, schedule_name, scheduled_for)
SELECT t.id, t.process_id, p.name, t.execution_order, t.kind, t.body, $2, t.attempt,
       0, now(), now(), 0, $3, $4, t.schedule_name, t.scheduled_for
  FROM stageq.tasks t JOIN stageq.processes p ON p.id = t.process_id
 WHERE t.process_id = $1 AND t.state = 'failed'`
	auditTaskSQL = `
INSERT INTO stageq.logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt,
                         lease_token, started_at, ended_at, duration_ms, outcome, error, schedule_name, scheduled_for)
SELECT t.id, t.process_id, p.name, t.execution_order, t.kind, t.body, $2, t.attempt,
       0, now(), now(), 0, $3, $4, t.schedule_name, t.scheduled_for
  FROM stageq.tasks t JOIN stageq.processes p ON p.id = t.process_id
 WHERE t.id = $1`
	// A process that a cancel or discard emptied ended without doing all its
	// work; open_stage has just marked it succeeded. In: process id.
	markCancelledSQL = `UPDATE stageq.processes SET state = 'cancelled' WHERE id = $1 AND state = 'succeeded'`
)

// auditProcess writes the Logs rows of an operator action on a locked process;
// markCancelled, for removals, marks it cancelled once open_stage found it empty.
func auditProcess(ctx context.Context, q dialect.Querier, id int64, o dialect.Outcome) error {
	_, err := q.ExecContext(ctx, auditProcessSQL, id, dialect.Actor(ctx), string(o), dialect.AuditNote(o))
	if err != nil {
		return fmt.Errorf("audit: %w", mapErr(err))
	}
	return nil
}

func markCancelled(ctx context.Context, q dialect.Querier, id int64, o dialect.Outcome) error {
	if o == dialect.OutcomeRetried {
		return nil
	}
	if _, err := q.ExecContext(ctx, markCancelledSQL, id); err != nil {
		return fmt.Errorf("mark process cancelled: %w", mapErr(err))
	}
	return nil
}

// withProcess locks the named process in a transaction and runs fn with its id;
// afterwards it re-derives the process's stage and run-queue state.
func (p *Postgres) withProcess(ctx context.Context, tx *sql.Tx, name string, fn func(q dialect.Querier, id int64) error) error {
	return p.withProcessThen(ctx, tx, name, fn, nil)
}

// withProcessThen is withProcess with a step after open_stage, in the same
// transaction (an operator action's markCancelled).
func (p *Postgres) withProcessThen(ctx context.Context, tx *sql.Tx, name string, fn, then func(q dialect.Querier, id int64) error) error {
	return p.inTx(ctx, tx, func(q dialect.Querier) error {
		var id int64
		err := q.QueryRowContext(ctx, lockProcessSQL, name).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("process %q: %w", name, dialect.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("lock process %q: %w", name, mapErr(err))
		}
		if err := fn(q, id); err != nil {
			return err
		}
		if _, err := q.ExecContext(ctx, p.calls.SQL(openStageSQL), id); err != nil {
			return fmt.Errorf("process %q: open stage: %w", name, mapErr(err))
		}
		if then != nil {
			return then(q, id)
		}
		return nil
	})
}

// ProcessConfigure implements dialect.Operator.
func (p *Postgres) ProcessConfigure(ctx context.Context, tx *sql.Tx, name string, s dialect.ProcessSettings) error {
	if err := dialect.ValidateSettings(s); err != nil {
		return fmt.Errorf("configure process %q: %w", name, err)
	}
	return p.withProcess(ctx, tx, name, func(q dialect.Querier, id int64) error {
		if _, err := q.ExecContext(ctx, p.calls.SQL(configureSQL), id, dialect.NullInt(s.Priority), dialect.NullInt(s.Weight), dialect.NullInt(s.MaxParallel)); err != nil {
			return fmt.Errorf("configure process %q: %w", name, mapErr(err))
		}
		return nil
	})
}

// ProcessSetPaused implements dialect.Operator.
func (p *Postgres) ProcessSetPaused(ctx context.Context, name string, paused bool) error {
	return p.withProcess(ctx, nil, name, func(q dialect.Querier, id int64) error {
		if _, err := q.ExecContext(ctx, pauseSQL, id, paused); err != nil {
			return fmt.Errorf("pause process %q: %w", name, mapErr(err))
		}
		return nil
	})
}

// processBulk runs one bulk statement on a locked process and insists it changed
// something, so that a command with nothing to do says so.
func (p *Postgres) processBulk(ctx context.Context, name, stmt, what string, o dialect.Outcome) (int, error) {
	var n int64
	err := p.withProcessThen(ctx, nil, name, func(q dialect.Querier, id int64) error {
		if err := auditProcess(ctx, q, id, o); err != nil {
			return fmt.Errorf("%s process %q: %w", what, name, err)
		}
		res, err := q.ExecContext(ctx, stmt, id)
		if err != nil {
			return fmt.Errorf("%s process %q: %w", what, name, mapErr(err))
		}
		if n, err = res.RowsAffected(); err != nil {
			return fmt.Errorf("%s process %q: %w", what, name, err)
		}
		if n == 0 {
			return fmt.Errorf("%s process %q: %w: it has no failed tasks", what, name, dialect.ErrWrongState)
		}
		return nil
	}, func(q dialect.Querier, id int64) error { return markCancelled(ctx, q, id, o) })
	return int(n), err
}

// ProcessRetry implements dialect.Operator.
func (p *Postgres) ProcessRetry(ctx context.Context, name string) (int, error) {
	return p.processBulk(ctx, name, retryProcessSQL, "retry", dialect.OutcomeRetried)
}

// ProcessDiscard implements dialect.Operator.
func (p *Postgres) ProcessDiscard(ctx context.Context, name string) (int, error) {
	return p.processBulk(ctx, name, discardProcessSQL, "discard", dialect.OutcomeDiscarded)
}

// ProcessCancel implements dialect.Operator.
func (p *Postgres) ProcessCancel(ctx context.Context, name string) (removed, running int, err error) {
	err = p.withProcessThen(ctx, nil, name, func(q dialect.Querier, id int64) error {
		o := dialect.OutcomeCancelled
		res, err := q.ExecContext(ctx, cancelProcessSQL, id, dialect.Actor(ctx), string(o), dialect.AuditNote(o))
		if err != nil {
			return fmt.Errorf("cancel process %q: %w", name, mapErr(err))
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("cancel process %q: %w", name, err)
		}
		removed = int(n)
		if err := q.QueryRowContext(ctx, runningProcessSQL, id).Scan(&running); err != nil {
			return fmt.Errorf("cancel process %q: %w", name, mapErr(err))
		}
		if removed == 0 {
			return fmt.Errorf("cancel process %q: %w: it has no waiting or failed tasks (%d running)", name, dialect.ErrWrongState, running)
		}
		return nil
	}, func(q dialect.Querier, id int64) error { return markCancelled(ctx, q, id, dialect.OutcomeCancelled) })
	return removed, running, err
}

// withTask locks a task's process, then the task, checks its state with allow,
// and runs fn; then it re-derives the process's stage.
func (p *Postgres) withTask(ctx context.Context, id int64, allow func(state, worker string) error, stmt string, o dialect.Outcome) error {
	return p.inTx(ctx, nil, func(q dialect.Querier) error {
		var pid int64
		err := q.QueryRowContext(ctx, taskProcessSQL, id).Scan(&pid)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("task %d: %w (finished tasks leave the queue; see logs)", id, dialect.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("task %d: %w", id, mapErr(err))
		}
		if err := q.QueryRowContext(ctx, lockProcessByIDSQL, pid).Scan(&pid); err != nil {
			return fmt.Errorf("task %d: lock process: %w", id, mapErr(err))
		}
		var state, worker string
		err = q.QueryRowContext(ctx, taskLockSQL, id).Scan(&state, &worker)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("task %d: %w (it finished meanwhile)", id, dialect.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("task %d: %w", id, mapErr(err))
		}
		if err := allow(state, worker); err != nil {
			return fmt.Errorf("task %d: %w", id, err)
		}
		if _, err := q.ExecContext(ctx, auditTaskSQL, id, dialect.Actor(ctx), string(o), dialect.AuditNote(o)); err != nil {
			return fmt.Errorf("task %d: audit: %w", id, mapErr(err))
		}
		if _, err := q.ExecContext(ctx, stmt, id); err != nil {
			return fmt.Errorf("task %d: %w", id, mapErr(err))
		}
		if _, err := q.ExecContext(ctx, p.calls.SQL(openStageSQL), pid); err != nil {
			return fmt.Errorf("task %d: open stage: %w", id, mapErr(err))
		}
		if err := markCancelled(ctx, q, pid, o); err != nil {
			return fmt.Errorf("task %d: %w", id, err)
		}
		return nil
	})
}

// TaskRetry implements dialect.Operator.
func (p *Postgres) TaskRetry(ctx context.Context, id int64) error {
	return p.withTask(ctx, id, dialect.AllowRetry, retryTaskSQL, dialect.OutcomeRetried)
}

// TaskDiscard implements dialect.Operator.
func (p *Postgres) TaskDiscard(ctx context.Context, id int64) error {
	return p.withTask(ctx, id, dialect.AllowDiscard, deleteTaskSQL, dialect.OutcomeDiscarded)
}

// TaskCancel implements dialect.Operator.
func (p *Postgres) TaskCancel(ctx context.Context, id int64) error {
	return p.withTask(ctx, id, dialect.AllowCancel, deleteTaskSQL, dialect.OutcomeCancelled)
}

// processListSQL reads processes. In: name ("" for all), include succeeded.
const processListSQL = `
SELECT id, name, state, paused, current_order, priority, weight, max_parallel
  FROM stageq.processes
 WHERE ($1 = '' OR name = $1) AND ($2 OR $1 <> '' OR state NOT IN ('succeeded', 'cancelled'))
 ORDER BY name`

// stageCountSQL counts the tasks in the queue per process, stage and state.
const stageCountSQL = `
SELECT t.process_id, t.execution_order,
       count(*) FILTER (WHERE t.state IN ('blocked', 'scheduled', 'available')),
       count(*) FILTER (WHERE t.state = 'running'),
       count(*) FILTER (WHERE t.state = 'failed')
  FROM stageq.tasks t JOIN stageq.processes p ON p.id = t.process_id
 WHERE ($1 = '' OR p.name = $1) AND ($2 OR $1 <> '' OR p.state NOT IN ('succeeded', 'cancelled'))
 GROUP BY t.process_id, t.execution_order`

// stageDoneSQL counts the tasks that succeeded, from Logs (they left Tasks).
const stageDoneSQL = `
SELECT l.process_id, l.execution_order, count(DISTINCT l.task_id)
  FROM stageq.logs l JOIN stageq.processes p ON p.id = l.process_id
 WHERE ($1 = '' OR p.name = $1) AND ($2 OR $1 <> '' OR p.state NOT IN ('succeeded', 'cancelled'))
   AND l.outcome = 'succeeded'
 GROUP BY l.process_id, l.execution_order`

// ProcessList implements dialect.Operator.
func (p *Postgres) ProcessList(ctx context.Context, f dialect.ProcessFilter) ([]dialect.ProcessStatus, error) {
	return dialect.CollectProcessStatus(ctx, p.db, f, processListSQL, stageCountSQL, stageDoneSQL, mapErr)
}

const workerListSQL = `
SELECT w.id, w.hostname, w.pid, w.concurrency, w.version, w.started_at, w.heartbeat_at, w.stopped_at,
       (SELECT count(*) FROM stageq.tasks t WHERE t.worker_id = w.id AND t.state = 'running'), now()
  FROM stageq.workers w
 ORDER BY w.heartbeat_at DESC, w.id`

// WorkerList implements dialect.Operator.
func (p *Postgres) WorkerList(ctx context.Context) ([]dialect.WorkerStatus, error) {
	rows, err := p.db.QueryContext(ctx, workerListSQL)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", mapErr(err))
	}
	defer rows.Close()
	var out []dialect.WorkerStatus
	for rows.Next() {
		var w dialect.WorkerStatus
		var stopped sql.NullTime
		if err := rows.Scan(&w.ID, &w.Hostname, &w.PID, &w.Concurrency, &w.Version, &w.StartedAt,
			&w.HeartbeatAt, &stopped, &w.Running, &w.Now); err != nil {
			return nil, fmt.Errorf("list workers: %w", err)
		}
		if stopped.Valid {
			w.StoppedAt = &stopped.Time
		}
		out = append(out, w)
	}
	return out, rows.Err()
}
