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

// taskListSQL reads tasks by process (tasksOf): a named process's, or those of
// the open processes (processes_open), the only ones that hold tasks: a
// process is active or failed from the transaction that gives it tasks until
// its last one leaves. It walked every process by name, past every finished
// one that retention keeps: 1.7 s a list beside 400,000 of them.
//
// OFFSET 0 keeps the state and kind filters out of the per-process read, so
// that it is always a probe of the process's own tasks. Pushed into it, a
// state of available let statistics taken while no task waited (an idle
// queue's) choose tasks_claim, every available task, read once per process:
// 400 s for one `queuectl tasks --state available` there, and still 12,000
// index entries a process once the walk kept to the open ones (300 open
// processes of 120 tasks; list_plans_test.go checks the plan).
var taskListSQL = `
SELECT t.id, p.name, t.execution_order, t.kind, t.body, t.state, t.attempt, t.max_attempts,
       t.priority, t.run_at, coalesce(t.worker_id, ''), coalesce(t.last_error, ''), t.abandons
  FROM ((SELECT id, name FROM stageq.processes WHERE name = $1)
        UNION ALL
        (SELECT id, name FROM stageq.processes WHERE $1 = '' AND state IN ('active', 'failed'))) p
  CROSS JOIN LATERAL (SELECT * FROM ` + tasksOf("p.id") + ` pt OFFSET 0) t
 WHERE ($2 = '' OR t.state = $2)
   AND ($4 = '' OR t.kind = $4)
 ORDER BY p.name, t.execution_order, t.id
 LIMIT $3`

const processGetSQL = `SELECT id, name, state, current_order FROM stageq.processes WHERE name = $1`
