package postgres

import (
	"github.com/stageq/stageq/dialect"
)

var _ dialect.Operator = (*Postgres)(nil)

// Operator statements, run by sqlbase (base.go). Each one that changes tasks
// runs after lockProcessSQL (or lockProcessByIDSQL) in the same transaction:
// the process row first, then task rows, the order finish, submit, rescue and
// the claim all keep (a claim locks a process's row only when the process is
// capped, and before the task).
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
	// available task at any moment (a claim of an uncapped process locks no
	// process row, and a capped one's may have taken the row before), and a task it
	// took between an audit statement and a DELETE would be recorded cancelled
	// yet run. The DELETE's RETURNING is exactly what went. In: process id,
	// who, outcome, note.
	cancelProcessSQL = `
WITH gone AS (
    DELETE FROM stageq.tasks WHERE process_id = $1 AND state <> 'running'
    RETURNING id, process_id, execution_order, kind, body, attempt, schedule_name, scheduled_for
), done AS (
    SELECT clock_timestamp() AS at FROM (SELECT count(*) FROM gone) n
)
INSERT INTO stageq.logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt,
                         lease_token, started_at, ended_at, duration_ms, outcome, error, schedule_name, scheduled_for)
SELECT g.id, g.process_id, p.name, g.execution_order, g.kind, g.body, $2, g.attempt,
       0, d.at, d.at, 0, $3, $4, g.schedule_name, g.scheduled_for
  FROM gone g JOIN stageq.processes p ON p.id = g.process_id CROSS JOIN done d`
	runningProcessSQL = `SELECT count(*) FROM stageq.tasks WHERE process_id = $1 AND state = 'running'`

	taskProcessSQL = `SELECT process_id FROM stageq.tasks WHERE id = $1`
	taskLockSQL    = `SELECT state, coalesce(worker_id, '') FROM stageq.tasks WHERE id = $1 FOR UPDATE`
	retryTaskSQL   = `UPDATE stageq.tasks SET state = 'blocked', attempt = 0, abandons = 0, run_at = now() WHERE id = $1`
	deleteTaskSQL  = `DELETE FROM stageq.tasks WHERE id = $1`

	// Operator actions leave a Logs row per task they change, written before the
	// change under the same locks (failed tasks change only under their
	// process's lock, so none can slip between the two). In: process id (or
	// task id), who, outcome, note. The rows are dated by their statement,
	// which runs once the process's lock is had (statement_timestamp(), not
	// now(), the start of a transaction that may have waited for that lock):
	// claims take no process lock, and an attempt started while the action
	// waited must not look newer than the action (the end state, open_stage's
	// end_state). One statement's rows share one instant, as a bulk action's
	// did. cancelProcessSQL's rows are dated once its DELETE has ended
	// (clock_timestamp() after every row of gone): the DELETE may wait for a
	// task row a claim took meanwhile, and then passes over it, running.
	auditProcessSQL = auditRowsSQL + ` WHERE t.process_id = $1 AND t.state = 'failed'`
	auditTaskSQL    = auditRowsSQL + ` WHERE t.id = $1`
	auditRowsSQL    = `
INSERT INTO stageq.logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt,
                         lease_token, started_at, ended_at, duration_ms, outcome, error, schedule_name, scheduled_for)
SELECT t.id, t.process_id, ` + auditNameSQL + `, t.execution_order, t.kind, t.body, $2, t.attempt,
       0, statement_timestamp(), statement_timestamp(), 0, $3, $4, t.schedule_name, t.scheduled_for
  FROM stageq.tasks t LEFT JOIN stageq.processes p ON p.id = t.process_id`
	// auditNameSQL names the audited task's process: by its row, or, where a
	// DBA deleted that (a task can outlive it: no foreign key since migration
	// 14), by the newest Logs row of the process, a seek on logs_process.
	auditNameSQL = `coalesce(p.name,
                (SELECT l.process_name FROM stageq.logs l WHERE l.process_id = t.process_id
                  ORDER BY l.started_at DESC LIMIT 1),
                'process ' || t.process_id || ' (deleted)')`
)

// processPage selects the processes a list shows, by name, with the columns
// the list shows. In: name ("" for all), include succeeded and cancelled ones,
// at most this many.
//
// Each of the three lists has a branch of its own, with its own way in: one
// name (processes_name_key), every process (that index, walked for the first
// $3) and the open ones (processes_open, then sorted). A branch whose
// parameters do not select it is skipped unread, in a generic plan too. As one
// condition with ORs of parameters, the default list walked the name index
// past every finished process that retention keeps (90 days of them): 62 to
// 126 ms a statement beside 500,000 of them, three statements every refresh of
// the dashboard and every queuectl status; now 0.1 ms. The columns come with
// the rows: joined back to processes by id, a generic plan hashed the whole
// table (list_plans_test.go).
const processPage = `
SELECT id, name, state, paused, current_order, priority, weight, max_parallel FROM (
  (SELECT * FROM stageq.processes WHERE name = $1)
  UNION ALL
  (SELECT * FROM stageq.processes WHERE $1 = '' AND $2 ORDER BY name LIMIT $3)
  UNION ALL
  (SELECT * FROM stageq.processes WHERE $1 = '' AND NOT $2 AND state IN ('active', 'failed')
    ORDER BY name LIMIT $3)
) page
 ORDER BY name
 LIMIT $3`

// processListSQL reads processes. In: as processPage.
const processListSQL = processPage

// stageCountSQL counts the tasks in the queue per process, stage and state,
// reading them by process (tasksOf). In: as processPage.
var stageCountSQL = `
SELECT p.id, t.execution_order,
       count(*) FILTER (WHERE t.state IN ('blocked', 'scheduled', 'available')),
       count(*) FILTER (WHERE t.state = 'running'),
       count(*) FILTER (WHERE t.state = 'failed')
  FROM (` + processPage + `) p CROSS JOIN LATERAL ` + tasksOf("p.id") + ` t
 GROUP BY p.id, t.execution_order`

// stageDoneSQL counts the tasks that succeeded, from Logs (they left Tasks).
// A task has one succeeded row at most (its end is fenced by its lease
// token; the fault tests count them), so rows are counted, not distinct
// tasks: 1.0 s against 3.8 s for a process of 2,000,000 tasks here.
// In: as processPage.
const stageDoneSQL = `
SELECT l.process_id, l.execution_order, count(*)
  FROM stageq.logs l JOIN (` + processPage + `) p ON p.id = l.process_id
 WHERE l.outcome = 'succeeded'
 GROUP BY l.process_id, l.execution_order`

const workerListSQL = `
SELECT w.id, w.hostname, w.pid, w.concurrency, w.version, w.started_at, w.heartbeat_at, w.stopped_at,
       (SELECT count(*) FROM stageq.tasks t WHERE t.worker_id = w.id AND t.state = 'running'), now()
  FROM stageq.workers w
 ORDER BY w.heartbeat_at DESC, w.id`
