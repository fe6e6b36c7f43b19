package postgres

// logListSQL reads Logs oldest first, logListNewestSQL the newest rows of the
// filter (sqlbase turns them oldest first). Empty filters match everything;
// the text is fixed whatever the filter, so it is prepared once. A process
// by id ($8) seeks logs_process; by name ($1) it reads through Logs, which
// has no index on names (logs_by_process_plan_test.go). Ids are cast: from
// "$2 = 0" alone PostgreSQL would type them int4, and refuse ids past 2^31.
const (
	logListSQL       = logListFrom + ` ORDER BY started_at, id LIMIT $6`
	logListNewestSQL = logListFrom + ` ORDER BY started_at DESC, id DESC LIMIT $6`
)

const logListFrom = `
SELECT id, task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt,
       started_at, ended_at, outcome, coalesce(error, ''), retry_at, coalesce(schedule_name, '')
  FROM stageq.logs
 WHERE ($1 = '' OR process_name = $1)
   AND ($2::bigint = 0 OR task_id = $2::bigint)
   AND ($3 = '' OR worker_id = $3)
   AND ($4 = '' OR outcome = $4)
   AND started_at >= $5 AND (started_at > $5 OR id > $7)
   AND ($8::bigint = 0 OR process_id = $8::bigint)`

// taskListSQL reads tasks by process (tasksOf).
var taskListSQL = `
SELECT t.id, p.name, t.execution_order, t.kind, t.body, t.state, t.attempt, t.max_attempts,
       t.priority, t.run_at, coalesce(t.worker_id, ''), coalesce(t.last_error, ''), t.abandons
  FROM stageq.processes p CROSS JOIN LATERAL ` + tasksOf("p.id") + ` t
 WHERE ($1 = '' OR p.name = $1)
   AND ($2 = '' OR t.state = $2)
   AND ($4 = '' OR t.kind = $4)
 ORDER BY p.name, t.execution_order, t.id
 LIMIT $3`

const processGetSQL = `SELECT id, name, state, current_order FROM stageq.processes WHERE name = $1`
