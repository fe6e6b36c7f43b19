package sqlite

import (
	"database/sql"
	"time"
)

// logListSQL reads Logs oldest first, logListNewestSQL the newest rows of the
// filter (sqlbase turns them oldest first); empty filters match everything.
// In: process, task, worker, outcome, since, limit, the id to page after among
// rows started at since exactly (0: none), process id (0: any).
const (
	logListSQL       = logListFrom + ` ORDER BY started_at, id LIMIT ?6`
	logListNewestSQL = logListFrom + ` ORDER BY started_at DESC, id DESC LIMIT ?6`
)

const logListFrom = `
SELECT id, task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt,
       started_at, ended_at, outcome, coalesce(error, ''), retry_at, coalesce(schedule_name, '')
  FROM stageq_logs
 WHERE (?1 = '' OR process_name = ?1)
   AND (?2 = 0 OR task_id = ?2)
   AND (?3 = '' OR worker_id = ?3)
   AND (?4 = '' OR outcome = ?4)
   AND started_at >= ?5 AND (started_at > ?5 OR id > ?7)
   AND (?8 = 0 OR process_id = ?8)`

func parseNullTime(s sql.NullString) (*time.Time, error) {
	if !s.Valid {
		return nil, nil
	}
	t, err := parseTime(s.String)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// In: process, state, limit.
const taskListSQL = `
SELECT t.id, p.name, t.execution_order, t.kind, t.body, t.state, t.attempt, t.max_attempts,
       t.priority, t.run_at, coalesce(t.worker_id, ''), coalesce(t.last_error, ''), t.abandons
  FROM stageq_tasks t JOIN stageq_processes p ON p.id = t.process_id
 WHERE (?1 = '' OR p.name = ?1)
   AND (?2 = '' OR t.state = ?2)
   AND (?4 = '' OR t.kind = ?4)
 ORDER BY p.name, t.execution_order, t.id
 LIMIT ?3`

const processGetSQL = `SELECT id, name, state, current_order FROM stageq_processes WHERE name = ?`
