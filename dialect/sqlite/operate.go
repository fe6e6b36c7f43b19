package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stageq/stageq/dialect"
)

var _ dialect.Operator = (*SQLite)(nil)

// Operator statements; each runs in one BEGIN IMMEDIATE transaction with
// openStage afterwards, as finish and submit do.
const (
	opProcessIDSQL = `SELECT id FROM stageq_processes WHERE name = ?`
	// In: priority, weight, max_parallel (NULL: unchanged; 0: no cap), id.
	opConfigureSQL = `
UPDATE stageq_processes
   SET priority = coalesce(?1, priority),
       weight = coalesce(?2, weight),
       max_parallel = CASE WHEN ?3 IS NULL THEN max_parallel WHEN ?3 = 0 THEN NULL ELSE ?3 END,
       updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
 WHERE id = ?4`
	// A new priority reaches the tasks already waiting (the claim orders by
	// their copy of it). In: priority, process.
	opPrioritySQL = `UPDATE stageq_tasks SET process_priority = ?1 WHERE process_id = ?2 AND process_priority <> ?1`
	// A new weight re-spaces the turns of the tasks already stamped, from the
	// earliest of them, so a plan's weight applies to its own tasks. In:
	// process, stride.
	opRestampSQL = `
WITH w AS (
    SELECT id, row_number() OVER (ORDER BY vtime, id) AS rk,
           min(vtime) OVER () AS base
      FROM stageq_tasks WHERE process_id = ?1 AND state = 'available'
)
UPDATE stageq_tasks
   SET vtime = (SELECT base + (rk - 1) * ?2 FROM w WHERE w.id = stageq_tasks.id)
 WHERE id IN (SELECT id FROM w)
RETURNING vtime`
	opSetVTailSQL   = `UPDATE stageq_processes SET vtail = ? WHERE id = ?`
	opReadWeightSQL = `SELECT weight, priority FROM stageq_processes WHERE id = ?`
	opPauseSQL      = `UPDATE stageq_processes SET paused = ?, updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE id = ?`
	// A retried task starts over with fresh attempts. It waits blocked until
	// openStage (run next, in the same transaction) makes it available with its
	// turn stamped, when its stage is the open one. In: process id.
	opRetryProcessSQL = `
UPDATE stageq_tasks SET state = 'blocked', attempt = 0, abandons = 0, run_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
 WHERE process_id = ?1 AND state = 'failed'`
	opDiscardProcessSQL = `DELETE FROM stageq_tasks WHERE process_id = ? AND state = 'failed'`
	opCancelProcessSQL  = `DELETE FROM stageq_tasks WHERE process_id = ? AND state <> 'running'`
	opRunningSQL        = `SELECT count(*) FROM stageq_tasks WHERE process_id = ? AND state = 'running'`
	opTaskSQL           = `SELECT process_id, state, coalesce(worker_id, '') FROM stageq_tasks WHERE id = ?`
	opRetryTaskSQL      = `
UPDATE stageq_tasks SET state = 'blocked', attempt = 0, abandons = 0, run_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE id = ?`
	opDeleteTaskSQL = `DELETE FROM stageq_tasks WHERE id = ?`

	// Operator actions leave a Logs row per task they change, written before the
	// change in the same transaction. In: process id (or task id), who, outcome,
	// note, and whether every task that is not running counts (cancel) or only
	// failed ones (retry, discard).
	opAuditProcessSQL = `
INSERT INTO stageq_logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt,
                         lease_token, started_at, ended_at, duration_ms, outcome, error, schedule_name, scheduled_for)
SELECT t.id, t.process_id, p.name, t.execution_order, t.kind, t.body, ?2, t.attempt, 0,
       strftime('%Y-%m-%d %H:%M:%f', 'now'), strftime('%Y-%m-%d %H:%M:%f', 'now'), 0, ?3, ?4, t.schedule_name, t.scheduled_for
  FROM stageq_tasks t JOIN stageq_processes p ON p.id = t.process_id
 WHERE t.process_id = ?1 AND (t.state = 'failed' OR (?5 AND t.state <> 'running'))`
	opAuditTaskSQL = `
INSERT INTO stageq_logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt,
                         lease_token, started_at, ended_at, duration_ms, outcome, error, schedule_name, scheduled_for)
SELECT t.id, t.process_id, p.name, t.execution_order, t.kind, t.body, ?2, t.attempt, 0,
       strftime('%Y-%m-%d %H:%M:%f', 'now'), strftime('%Y-%m-%d %H:%M:%f', 'now'), 0, ?3, ?4, t.schedule_name, t.scheduled_for
  FROM stageq_tasks t JOIN stageq_processes p ON p.id = t.process_id
 WHERE t.id = ?1`
	// A process that a cancel or discard emptied ended without doing all its
	// work; openStage has just marked it succeeded. In: process id.
	opMarkCancelledSQL = `UPDATE stageq_processes SET state = 'cancelled' WHERE id = ? AND state = 'succeeded'`

	// Status queries; in: name ("" for all), include succeeded.
	opProcessListSQL = `
SELECT id, name, state, paused, current_order, priority, weight, max_parallel
  FROM stageq_processes
 WHERE (?1 = '' OR name = ?1) AND (?2 OR ?1 <> '' OR state NOT IN ('succeeded', 'cancelled'))
 ORDER BY name`
	opStageCountSQL = `
SELECT t.process_id, t.execution_order,
       sum(t.state IN ('blocked', 'scheduled', 'available')), sum(t.state = 'running'), sum(t.state = 'failed')
  FROM stageq_tasks t JOIN stageq_processes p ON p.id = t.process_id
 WHERE (?1 = '' OR p.name = ?1) AND (?2 OR ?1 <> '' OR p.state NOT IN ('succeeded', 'cancelled'))
 GROUP BY t.process_id, t.execution_order`
	opStageDoneSQL = `
SELECT l.process_id, l.execution_order, count(DISTINCT l.task_id)
  FROM stageq_logs l JOIN stageq_processes p ON p.id = l.process_id
 WHERE (?1 = '' OR p.name = ?1) AND (?2 OR ?1 <> '' OR p.state NOT IN ('succeeded', 'cancelled'))
   AND l.outcome = 'succeeded'
 GROUP BY l.process_id, l.execution_order`

	opWorkerListSQL = `
SELECT w.id, w.hostname, w.pid, w.concurrency, w.version, w.started_at, w.heartbeat_at, w.stopped_at,
       (SELECT count(*) FROM stageq_tasks t WHERE t.worker_id = w.id AND t.state = 'running'),
       strftime('%Y-%m-%d %H:%M:%f', 'now')
  FROM stageq_workers w
 ORDER BY w.heartbeat_at DESC, w.id`
)

// withProcess runs fn on the named process in a write transaction, then
// re-derives its stage and run-queue state.
func (s *SQLite) withProcess(ctx context.Context, tx *sql.Tx, name string, fn func(q dialect.Querier, id int64) error) error {
	return s.withProcessThen(ctx, tx, name, fn, nil)
}

// auditProcess writes the Logs rows of an operator action on a process.
func auditProcess(ctx context.Context, q dialect.Querier, id int64, o dialect.Outcome) error {
	_, err := q.ExecContext(ctx, opAuditProcessSQL, id, dialect.Actor(ctx), string(o), dialect.AuditNote(o), o == dialect.OutcomeCancelled)
	if err != nil {
		return fmt.Errorf("audit: %w", mapErr(err))
	}
	return nil
}

// markCancelled, after a removal, marks the process cancelled if openStage
// found it empty.
func markCancelled(ctx context.Context, q dialect.Querier, id int64, o dialect.Outcome) error {
	if o == dialect.OutcomeRetried {
		return nil
	}
	if _, err := q.ExecContext(ctx, opMarkCancelledSQL, id); err != nil {
		return fmt.Errorf("mark process cancelled: %w", mapErr(err))
	}
	return nil
}

// withProcessThen is withProcess with a step after openStage, in the same
// transaction.
func (s *SQLite) withProcessThen(ctx context.Context, tx *sql.Tx, name string, fn, then func(q dialect.Querier, id int64) error) error {
	return s.inTx(ctx, tx, func(q dialect.Querier) error {
		var id int64
		err := q.QueryRowContext(ctx, opProcessIDSQL, name).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("process %q: %w", name, dialect.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("process %q: %w", name, mapErr(err))
		}
		if err := fn(q, id); err != nil {
			return err
		}
		if err := openStage(ctx, q, id); err != nil {
			return err
		}
		if then != nil {
			return then(q, id)
		}
		return nil
	})
}

// ProcessConfigure implements dialect.Operator.
func (s *SQLite) ProcessConfigure(ctx context.Context, tx *sql.Tx, name string, ps dialect.ProcessSettings) error {
	if err := dialect.ValidateSettings(ps); err != nil {
		return fmt.Errorf("configure process %q: %w", name, err)
	}
	return s.withProcess(ctx, tx, name, func(q dialect.Querier, id int64) error {
		var oldWeight, oldPriority, weight, priority int64
		if err := q.QueryRowContext(ctx, opReadWeightSQL, id).Scan(&oldWeight, &oldPriority); err != nil {
			return fmt.Errorf("configure process %q: %w", name, mapErr(err))
		}
		if _, err := q.ExecContext(ctx, opConfigureSQL, dialect.NullInt(ps.Priority), dialect.NullInt(ps.Weight), dialect.NullInt(ps.MaxParallel), id); err != nil {
			return fmt.Errorf("configure process %q: %w", name, mapErr(err))
		}
		if err := q.QueryRowContext(ctx, opReadWeightSQL, id).Scan(&weight, &priority); err != nil {
			return fmt.Errorf("configure process %q: %w", name, mapErr(err))
		}
		if priority != oldPriority {
			if _, err := q.ExecContext(ctx, opPrioritySQL, priority, id); err != nil {
				return fmt.Errorf("configure process %q: priority: %w", name, mapErr(err))
			}
		}
		if weight != oldWeight {
			return restamp(ctx, q, id, fairStride(weight))
		}
		return nil
	})
}

// restamp re-spaces a process's available tasks by a new stride and moves the
// end of its backlog with them.
func restamp(ctx context.Context, q dialect.Querier, id, stride int64) error {
	rows, err := q.QueryContext(ctx, opRestampSQL, id, stride)
	if err != nil {
		return fmt.Errorf("restamp process %d: %w", id, mapErr(err))
	}
	defer rows.Close()
	last, n := int64(0), 0
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return fmt.Errorf("restamp process %d: %w", id, err)
		}
		last, n = max(last, v), n+1
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("restamp process %d: %w", id, mapErr(err))
	}
	if n == 0 {
		return nil
	}
	if _, err := q.ExecContext(ctx, opSetVTailSQL, last+stride, id); err != nil {
		return fmt.Errorf("restamp process %d: %w", id, mapErr(err))
	}
	return nil
}

// ProcessSetPaused implements dialect.Operator.
func (s *SQLite) ProcessSetPaused(ctx context.Context, name string, paused bool) error {
	return s.withProcess(ctx, nil, name, func(q dialect.Querier, id int64) error {
		if _, err := q.ExecContext(ctx, opPauseSQL, paused, id); err != nil {
			return fmt.Errorf("pause process %q: %w", name, mapErr(err))
		}
		return nil
	})
}

func (s *SQLite) processBulk(ctx context.Context, name, stmt, what string, o dialect.Outcome) (int, error) {
	var n int64
	err := s.withProcessThen(ctx, nil, name, func(q dialect.Querier, id int64) error {
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
func (s *SQLite) ProcessRetry(ctx context.Context, name string) (int, error) {
	return s.processBulk(ctx, name, opRetryProcessSQL, "retry", dialect.OutcomeRetried)
}

// ProcessDiscard implements dialect.Operator.
func (s *SQLite) ProcessDiscard(ctx context.Context, name string) (int, error) {
	return s.processBulk(ctx, name, opDiscardProcessSQL, "discard", dialect.OutcomeDiscarded)
}

// ProcessCancel implements dialect.Operator.
func (s *SQLite) ProcessCancel(ctx context.Context, name string) (removed, running int, err error) {
	err = s.withProcessThen(ctx, nil, name, func(q dialect.Querier, id int64) error {
		if err := auditProcess(ctx, q, id, dialect.OutcomeCancelled); err != nil {
			return fmt.Errorf("cancel process %q: %w", name, err)
		}
		res, err := q.ExecContext(ctx, opCancelProcessSQL, id)
		if err != nil {
			return fmt.Errorf("cancel process %q: %w", name, mapErr(err))
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("cancel process %q: %w", name, err)
		}
		removed = int(n)
		if err := q.QueryRowContext(ctx, opRunningSQL, id).Scan(&running); err != nil {
			return fmt.Errorf("cancel process %q: %w", name, mapErr(err))
		}
		if removed == 0 {
			return fmt.Errorf("cancel process %q: %w: it has no waiting or failed tasks (%d running)", name, dialect.ErrWrongState, running)
		}
		return nil
	}, func(q dialect.Querier, id int64) error { return markCancelled(ctx, q, id, dialect.OutcomeCancelled) })
	return removed, running, err
}

func (s *SQLite) withTask(ctx context.Context, id int64, allow func(state, worker string) error, stmt string, o dialect.Outcome) error {
	return s.inTx(ctx, nil, func(q dialect.Querier) error {
		var pid int64
		var state, worker string
		err := q.QueryRowContext(ctx, opTaskSQL, id).Scan(&pid, &state, &worker)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("task %d: %w (finished tasks leave the queue; see logs)", id, dialect.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("task %d: %w", id, mapErr(err))
		}
		if err := allow(state, worker); err != nil {
			return fmt.Errorf("task %d: %w", id, err)
		}
		if _, err := q.ExecContext(ctx, opAuditTaskSQL, id, dialect.Actor(ctx), string(o), dialect.AuditNote(o)); err != nil {
			return fmt.Errorf("task %d: audit: %w", id, mapErr(err))
		}
		if _, err := q.ExecContext(ctx, stmt, id); err != nil {
			return fmt.Errorf("task %d: %w", id, mapErr(err))
		}
		if err := openStage(ctx, q, pid); err != nil {
			return err
		}
		if err := markCancelled(ctx, q, pid, o); err != nil {
			return fmt.Errorf("task %d: %w", id, err)
		}
		return nil
	})
}

// TaskRetry implements dialect.Operator.
func (s *SQLite) TaskRetry(ctx context.Context, id int64) error {
	return s.withTask(ctx, id, dialect.AllowRetry, opRetryTaskSQL, dialect.OutcomeRetried)
}

// TaskDiscard implements dialect.Operator.
func (s *SQLite) TaskDiscard(ctx context.Context, id int64) error {
	return s.withTask(ctx, id, dialect.AllowDiscard, opDeleteTaskSQL, dialect.OutcomeDiscarded)
}

// TaskCancel implements dialect.Operator.
func (s *SQLite) TaskCancel(ctx context.Context, id int64) error {
	return s.withTask(ctx, id, dialect.AllowCancel, opDeleteTaskSQL, dialect.OutcomeCancelled)
}

// ProcessList implements dialect.Operator.
func (s *SQLite) ProcessList(ctx context.Context, f dialect.ProcessFilter) ([]dialect.ProcessStatus, error) {
	return dialect.CollectProcessStatus(ctx, s.db, f, opProcessListSQL, opStageCountSQL, opStageDoneSQL, mapErr)
}

// WorkerList implements dialect.Operator.
func (s *SQLite) WorkerList(ctx context.Context) ([]dialect.WorkerStatus, error) {
	rows, err := s.pool().QueryContext(ctx, opWorkerListSQL)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", mapErr(err))
	}
	defer rows.Close()
	var out []dialect.WorkerStatus
	for rows.Next() {
		var w dialect.WorkerStatus
		var started, beat, now string
		var stopped sql.NullString
		if err := rows.Scan(&w.ID, &w.Hostname, &w.PID, &w.Concurrency, &w.Version, &started, &beat,
			&stopped, &w.Running, &now); err != nil {
			return nil, fmt.Errorf("list workers: %w", err)
		}
		for _, p := range []struct {
			dst *time.Time
			src string
		}{{&w.StartedAt, started}, {&w.HeartbeatAt, beat}, {&w.Now, now}} {
			if *p.dst, err = parseTime(p.src); err != nil {
				return nil, fmt.Errorf("list workers: %w", err)
			}
		}
		if w.StoppedAt, err = parseNullTime(stopped); err != nil {
			return nil, fmt.Errorf("list workers: %w", err)
		}
		out = append(out, w)
	}
	return out, rows.Err()
}
