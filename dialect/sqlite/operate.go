package sqlite

import (
	"context"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

var _ dialect.Operator = (*SQLite)(nil)

// Operator statements, run by sqlbase (base.go); each runs in one BEGIN
// IMMEDIATE transaction with openStage afterwards, as finish and submit do.
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
      FROM stageq_tasks WHERE process_id = ?1 AND state IN ('available', 'scheduled')
)
UPDATE stageq_tasks
   SET vtime = (SELECT base + (rk - 1) * ?2 FROM w WHERE w.id = stageq_tasks.id)
 WHERE id IN (SELECT id FROM w)
RETURNING vtime`
	opSetVTailSQL   = `UPDATE stageq_processes SET vtail = ? WHERE id = ?`
	opReadWeightSQL = `SELECT weight, priority FROM stageq_processes WHERE id = ?`
	opPauseSQL      = `UPDATE stageq_processes SET paused = ?2, updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE id = ?1`
	// A retried task starts over with fresh attempts. It waits blocked until
	// openStage (run next, in the same transaction) makes it available with its
	// turn stamped, when its stage is the open one. In: process id.
	opRetryProcessSQL = `
UPDATE stageq_tasks SET state = 'blocked', attempt = 0, abandons = 0, run_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
 WHERE process_id = ?1 AND state = 'failed'`
	opDiscardProcessSQL = `DELETE FROM stageq_tasks WHERE process_id = ? AND state = 'failed'`
	opCancelProcessSQL  = `DELETE FROM stageq_tasks WHERE process_id = ? AND state <> 'running'`
	opRunningSQL        = `SELECT count(*) FROM stageq_tasks WHERE process_id = ? AND state = 'running'`
	opTaskProcessSQL    = `SELECT process_id FROM stageq_tasks WHERE id = ?`
	opTaskSQL           = `SELECT state, coalesce(worker_id, '') FROM stageq_tasks WHERE id = ?`
	opRetryTaskSQL      = `
UPDATE stageq_tasks SET state = 'blocked', attempt = 0, abandons = 0, run_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE id = ?`
	opDeleteTaskSQL = `DELETE FROM stageq_tasks WHERE id = ?`

	// Operator actions leave a Logs row per task they change, written before the
	// change in the same transaction. In: process id (or task id), who, outcome,
	// note. A retry or discard audits the failed tasks, a cancel every task that
	// is not running.
	opAuditFailedSQL = opAuditRowsSQL + ` WHERE t.process_id = ?1 AND t.state = 'failed'`
	opAuditCancelSQL = opAuditRowsSQL + ` WHERE t.process_id = ?1 AND t.state <> 'running'`
	opAuditTaskSQL   = opAuditRowsSQL + ` WHERE t.id = ?1`
	opAuditRowsSQL   = `
INSERT INTO stageq_logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt,
                         lease_token, started_at, ended_at, duration_ms, outcome, error, schedule_name, scheduled_for)
SELECT t.id, t.process_id, ` + opAuditNameSQL + `, t.execution_order, t.kind, t.body, ?2, t.attempt, 0,
       strftime('%Y-%m-%d %H:%M:%f', 'now'), strftime('%Y-%m-%d %H:%M:%f', 'now'), 0, ?3, ?4, t.schedule_name, t.scheduled_for
  FROM stageq_tasks t LEFT JOIN stageq_processes p ON p.id = t.process_id`
	// opAuditNameSQL names the audited task's process: by its row, or, where
	// it was deleted by hand (foreign keys off, as the sqlite3 shell leaves
	// them), by the newest Logs row of the process (stageq_logs_process).
	opAuditNameSQL = `coalesce(p.name, ` + loggedNameSQL + `)`
	// opProcessByIDSQL reads a process back by id (sqlbase's LockProcessByID;
	// the write transaction is the lock). In: id. Out: id.
	opProcessByIDSQL = `SELECT id FROM stageq_processes WHERE id = ?`

	// Status queries; in: name ("" for all), include succeeded, at most this
	// many processes (processPage).
	opProcessListSQL = `
SELECT p.id, p.name, p.state, p.paused, p.current_order, p.priority, p.weight, p.max_parallel
  FROM (` + processPage + `) page JOIN stageq_processes p ON p.id = page.id
 ORDER BY p.name`
	opStageCountSQL = `
SELECT t.process_id, t.execution_order,
       sum(t.state IN ('blocked', 'scheduled', 'available')), sum(t.state = 'running'), sum(t.state = 'failed')
  FROM stageq_tasks t JOIN (` + processPage + `) p ON p.id = t.process_id
 GROUP BY t.process_id, t.execution_order`
	// One succeeded row per task at most (postgres/operate.go says why):
	// rows are counted, not distinct tasks.
	opStageDoneSQL = `
SELECT l.process_id, l.execution_order, count(*)
  FROM stageq_logs l JOIN (` + processPage + `) p ON p.id = l.process_id
 WHERE l.outcome = 'succeeded'
 GROUP BY l.process_id, l.execution_order`

	opWorkerListSQL = `
SELECT w.id, w.hostname, w.pid, w.concurrency, w.version, w.started_at, w.heartbeat_at, w.stopped_at,
       (SELECT count(*) FROM stageq_tasks t WHERE t.worker_id = w.id AND t.state = 'running'),
       strftime('%Y-%m-%d %H:%M:%f', 'now')
  FROM stageq_workers w
 ORDER BY w.heartbeat_at DESC, w.id`
)

// processPage selects the processes a list shows, by name; the list and its
// two counts read the same ones. In: name ("" for all), include succeeded, at
// most this many.
const processPage = `
SELECT id FROM stageq_processes
 WHERE (?1 = '' OR name = ?1) AND (?2 OR ?1 <> '' OR state NOT IN ('succeeded', 'cancelled'))
 ORDER BY name
 LIMIT ?3`

// configure applies new settings to a locked process and passes a changed
// priority or weight on to the tasks already waiting (sqlbase.Base.Configure).
func configure(ctx context.Context, q dialect.Querier, id int64, ps dialect.ProcessSettings) error {
	var oldWeight, oldPriority, weight, priority int64
	if err := q.QueryRowContext(ctx, opReadWeightSQL, id).Scan(&oldWeight, &oldPriority); err != nil {
		return mapErr(err)
	}
	if _, err := q.ExecContext(ctx, opConfigureSQL, dialect.NullInt(ps.Priority), dialect.NullInt(ps.Weight), dialect.NullInt(ps.MaxParallel), id); err != nil {
		return mapErr(err)
	}
	if err := q.QueryRowContext(ctx, opReadWeightSQL, id).Scan(&weight, &priority); err != nil {
		return mapErr(err)
	}
	if priority != oldPriority {
		if _, err := q.ExecContext(ctx, opPrioritySQL, priority, id); err != nil {
			return fmt.Errorf("priority: %w", mapErr(err))
		}
	}
	if weight != oldWeight {
		return restamp(ctx, q, id, fairStride(weight))
	}
	return nil
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

// loggedNameSQL names the process t.process_id, whose row was deleted by hand
// (foreign keys off, as the sqlite3 shell leaves them), by its newest Logs
// row, a seek on stageq_logs_process, or else by its id.
const loggedNameSQL = `coalesce((SELECT l.process_name FROM stageq_logs l WHERE l.process_id = t.process_id
                  ORDER BY l.started_at DESC LIMIT 1), 'process ' || t.process_id || ' (deleted)')`
