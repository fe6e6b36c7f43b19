package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// The stage barrier. A process's tasks of its lowest ExecutionOrder are
// 'available' ('scheduled' until their run_at); all higher ones wait
// 'blocked', and so does every task of a paused process. openStage re-derives
// that after anything that can change the lowest order (a submission, a task
// leaving, an operator's command), always inside the caller's write
// transaction. Each statement is a seek on stageq_tasks_stage (process_id,
// execution_order).
const (
	stageReadSQL   = `SELECT current_order, paused, weight, priority FROM stageq_processes WHERE id = ?`
	stageLowestSQL = `SELECT min(execution_order) FROM stageq_tasks WHERE process_id = ?`
	// A process with no task left ends 'cancelled' when its newest Logs row
	// is an operator's cancel or discard, written after its last attempt
	// started (one that emptied it, or one that left attempts running, the
	// last of which has just ended); 'succeeded' otherwise. A seek on
	// stageq_logs_process, read backwards.
	stageDoneSQL = `
UPDATE stageq_processes
   SET current_order = NULL,
       state = CASE WHEN (SELECT l.outcome FROM stageq_logs l WHERE l.process_id = ?1
                           ORDER BY l.started_at DESC, l.id DESC LIMIT 1) IN ('cancelled', 'discarded')
                    THEN 'cancelled' ELSE 'succeeded' END,
       updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), finished_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
 WHERE id = ?1 AND state IN ('active', 'failed')`
	stagePauseSQL = `UPDATE stageq_tasks SET state = 'blocked' WHERE process_id = ? AND state IN ('available', 'scheduled')`
	// A lower order arrived: tasks above it that have not started wait again.
	stageBlockSQL = `
UPDATE stageq_tasks SET state = 'blocked'
 WHERE process_id = ? AND execution_order > ? AND state IN ('available', 'scheduled')`
	// Opening a stage stamps its blocked tasks' turns from the current virtual
	// time, in their own priority order. In: process, order, base, stride,
	// process priority. Out: how many opened.
	stageOpenSQL = `
WITH b AS (
    SELECT id, row_number() OVER (ORDER BY priority DESC, run_at, id) AS rk
      FROM stageq_tasks INDEXED BY stageq_tasks_blocked
     WHERE process_id = ?1 AND execution_order = ?2 AND state = 'blocked'
)
UPDATE stageq_tasks
   SET state = CASE WHEN run_at > strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 'scheduled' ELSE 'available' END,
       vtime = ?3 + ((SELECT rk FROM b WHERE b.id = stageq_tasks.id) - 1) * ?4,
       process_priority = ?5
 WHERE id IN (SELECT id FROM b)`
	// In: process, order. A seek on stageq_tasks_blocked: opening a stage
	// costs nothing while it has nothing blocked.
	stageHasBlockedSQL = `
SELECT EXISTS (SELECT 1 FROM stageq_tasks INDEXED BY stageq_tasks_blocked
                WHERE process_id = ? AND execution_order = ? AND state = 'blocked')`
	stageSetSQL = `
UPDATE stageq_processes
   SET current_order = ?,
       state = CASE WHEN EXISTS (SELECT 1 FROM stageq_tasks WHERE process_id = ? AND state = 'failed')
                    THEN 'failed' ELSE 'active' END,
       updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), finished_at = NULL
 WHERE id = ?`
)

// stageStaysSQL: does the process still have a task at (or below) its open
// stage? In: process. A seek on stageq_tasks_stage.
const stageStaysSQL = `
SELECT EXISTS (SELECT 1 FROM stageq_tasks t
                WHERE t.process_id = p.id AND t.execution_order <= p.current_order)
  FROM stageq_processes p WHERE p.id = ?`

// openStageAfter re-derives a process's stage after some of its attempts
// ended. When they all succeeded (their tasks left the queue) and its open
// stage still has a task, nothing openStage decides can have changed: no
// lower order arrived, no task was handed back or failed, the pause is as it
// was. That is the common case of a batch that ends tasks of many processes,
// so it costs one seek per process instead of openStage's three reads and a
// write of the process's row (which leaves processes.updated_at as it was, as
// PostgreSQL's finish_many does).
func openStageAfter(ctx context.Context, q dialect.Querier, processID int64, onlySucceeded bool) error {
	if onlySucceeded {
		var stays bool
		err := q.QueryRowContext(ctx, stageStaysSQL, processID).Scan(&stays)
		if errors.Is(err, sql.ErrNoRows) {
			// Deleted by hand with foreign keys off (the sqlite3 shell's
			// default) while its task ran: that task's success is recorded,
			// and there is no stage to open. Failing here failed the whole
			// batch, each time it was sent again.
			return nil
		}
		if err != nil {
			return fmt.Errorf("open stage: tasks left in process %d's stage: %w", processID, mapErr(err))
		}
		if stays {
			return nil
		}
	}
	return openStage(ctx, q, processID)
}

func openStage(ctx context.Context, q dialect.Querier, processID int64) error {
	var old, lowest sql.NullInt64
	var paused bool
	var weight, priority int64
	if err := q.QueryRowContext(ctx, stageReadSQL, processID).Scan(&old, &paused, &weight, &priority); err != nil {
		return fmt.Errorf("open stage: read process %d: %w", processID, err)
	}
	if err := q.QueryRowContext(ctx, stageLowestSQL, processID).Scan(&lowest); err != nil {
		return fmt.Errorf("open stage: lowest order of process %d: %w", processID, err)
	}
	if !lowest.Valid {
		if _, err := q.ExecContext(ctx, stageDoneSQL, processID); err != nil {
			return fmt.Errorf("open stage: finish process %d: %w", processID, err)
		}
		return nil
	}
	switch {
	case paused:
		if _, err := q.ExecContext(ctx, stagePauseSQL, processID); err != nil {
			return fmt.Errorf("open stage: pause process %d: %w", processID, err)
		}
	default:
		if old.Valid && lowest.Int64 < old.Int64 {
			if _, err := q.ExecContext(ctx, stageBlockSQL, processID, lowest.Int64); err != nil {
				return fmt.Errorf("open stage: block above %d: %w", lowest.Int64, err)
			}
		}
		if err := openBlocked(ctx, q, processID, lowest.Int64, weight, priority); err != nil {
			return fmt.Errorf("open stage %d: %w", lowest.Int64, err)
		}
	}
	if _, err := q.ExecContext(ctx, stageSetSQL, lowest.Int64, processID, processID); err != nil {
		return fmt.Errorf("open stage: update process %d: %w", processID, err)
	}
	return nil
}

// openBlocked makes the blocked tasks of a process's open stage available,
// their turns stamped from the current virtual time (fair.go).
func openBlocked(ctx context.Context, q dialect.Querier, processID, order, weight, priority int64) error {
	var any bool
	if err := q.QueryRowContext(ctx, stageHasBlockedSQL, processID, order).Scan(&any); err != nil || !any {
		return err
	}
	base, err := stampBase(ctx, q, processID)
	if err != nil {
		return err
	}
	stride := fairStride(weight)
	res, err := q.ExecContext(ctx, stageOpenSQL, processID, order, base, stride, priority)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	return stampDone(ctx, q, processID, base+n*stride)
}
