package postgres

import (
	"context"
	"time"

	"github.com/stageq/stageq/dialect"
)

var _ dialect.Inspector = (*Postgres)(nil)

// waitStatements explain a waiting task (dialect.WaitStatements says what goes
// in and out). Each is a seek on an index of the schema: the task's primary key,
// tasks_waiting, and the partial indexes of running tasks. They only read.
var waitStatements = dialect.WaitStatements{
	Task: `
SELECT ` + dialect.WaitTaskCols + `, now()
  FROM stageq.tasks t JOIN stageq.processes p ON p.id = t.process_id
 WHERE t.id = $1`,
	Lower: `
SELECT ` + dialect.TaskRefCols + `
  FROM ` + tasksOf("$1") + ` t
  JOIN stageq.processes p ON p.id = t.process_id
 WHERE t.execution_order < $2
 ORDER BY t.execution_order, CASE t.state WHEN 'failed' THEN 0 WHEN 'running' THEN 1 ELSE 2 END, t.id
 LIMIT $3`,
	RunningProcess: `
SELECT ` + dialect.TaskRefCols + `
  FROM stageq.tasks t JOIN stageq.processes p ON p.id = t.process_id
 WHERE t.process_id = $1 AND t.state = 'running'
 ORDER BY t.id LIMIT $2`,
	RunningKey: `
SELECT ` + dialect.TaskRefCols + `
  FROM stageq.tasks t JOIN stageq.processes p ON p.id = t.process_id
 WHERE t.limit_key = $1 AND t.state = 'running'
 ORDER BY t.id LIMIT $2`,
	RunningKind: `
SELECT ` + dialect.TaskRefCols + `
  FROM stageq.tasks t JOIN stageq.processes p ON p.id = t.process_id
 WHERE t.kind = $1 AND t.state = 'running'
 ORDER BY t.id LIMIT $2`,
	Limits: `SELECT key, max_running FROM stageq.limits WHERE key IN ($1, $2) ORDER BY key`,
	Workers: `
SELECT count(*), coalesce(sum(concurrency), 0),
       (SELECT count(*) FROM stageq.tasks WHERE state = 'running')
  FROM stageq.workers
 WHERE stopped_at IS NULL AND heartbeat_at >= now() - $1::bigint * interval '1 millisecond'`,
	// A worker that recorded no kinds (before version 7) claims every kind.
	KindWorkers: `
SELECT w.id FROM stageq.workers w
 WHERE w.stopped_at IS NULL AND w.heartbeat_at >= now() - $2::bigint * interval '1 millisecond'
   AND (w.kinds IS NULL OR EXISTS (SELECT 1 FROM json_array_elements_text(w.kinds::json) k WHERE k = $1))
 ORDER BY w.id LIMIT $3`,
}

// stateCountSQL counts tasks by process, stage and state, largest first (a
// scan of the queue, which holds unfinished tasks only). In: max rows.
const stateCountSQL = `
SELECT p.name, t.execution_order, t.state, count(*) AS n
  FROM stageq.tasks t JOIN stageq.processes p ON p.id = t.process_id
 GROUP BY p.name, t.execution_order, t.state
 ORDER BY n DESC, p.name, t.execution_order, t.state
 LIMIT $1`

// TaskWait implements dialect.Inspector.
func (p *Postgres) TaskWait(ctx context.Context, id int64, live time.Duration) (dialect.TaskWait, error) {
	return dialect.CollectTaskWait(ctx, p.db, waitStatements, id, live, mapErr)
}

// TaskStateCounts implements dialect.Inspector.
func (p *Postgres) TaskStateCounts(ctx context.Context, maxRows int) ([]dialect.StateCount, error) {
	return dialect.CollectStateCounts(ctx, p.db, stateCountSQL, maxRows, mapErr)
}
