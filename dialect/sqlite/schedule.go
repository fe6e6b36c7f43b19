package sqlite

import (
	"errors"

	"github.com/stageq/stageq/dialect/sqlbase"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// scheduleColumns is the column list every schedule read returns, in the order
// dialect.ScanSchedule expects. sqlbase runs the statements (base.go).
const scheduleColumns = `id, name, coalesce(cron, ''), coalesce(interval_ms, 0), plan, missed, grace_ms,
       singleton, paused, next_run, last_run, coalesce(last_outcome, ''), coalesce(last_worker_id, ''), last_fired_at`

// scheduleSQL are the schedule statements sqlbase runs (base.go).
var scheduleSQL = sqlbase.ScheduleStatements{
	// In: name, cron (NULL for an interval), interval ms (NULL for cron), plan JSON,
	// missed policy, grace ms, singleton, paused, first next_run. Out: the id.
	Create: `
INSERT INTO stageq_schedules (name, cron, interval_ms, plan, missed, grace_ms, singleton, paused, next_run)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
RETURNING id`,

	// In: name (empty for all).
	List: `SELECT ` + scheduleColumns + `
  FROM stageq_schedules WHERE (?1 = '' OR name = ?1) ORDER BY name`,

	// In: name, paused.
	Pause: `
UPDATE stageq_schedules SET paused = ?2, updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE name = ?1`,

	Delete: `DELETE FROM stageq_schedules WHERE name = ?`,

	// LockDue reads the earliest due schedule. The caller's transaction
	// began IMMEDIATE, so it holds the database's write lock: no other scheduler
	// can read the same row as due until this one commits its advance.
	// Out: the schedule and the database's now.
	LockDue: `SELECT ` + scheduleColumns + `, ` + nowSQL + `
  FROM stageq_schedules
 WHERE paused = 0 AND next_run <= ` + nowSQL + `
 ORDER BY next_run
 LIMIT 1`,

	// In: name. Out: the schedule and the database's now (locked by the caller's
	// IMMEDIATE transaction).
	Lock: `SELECT ` + scheduleColumns + `, ` + nowSQL + `
  FROM stageq_schedules WHERE name = ?`,

	// A seek on stageq_tasks_schedule.
	Unfinished: `SELECT EXISTS (SELECT 1 FROM stageq_tasks WHERE schedule_name = ?)`,

	// In: schedule name, tick, task ids as a JSON array (SQLite has no arrays).
	Tag: `
UPDATE stageq_tasks SET schedule_name = ?, scheduled_for = ?
 WHERE id IN (SELECT value FROM json_each(?))`,

	// In: schedule id, tick, outcome, process id (NULL: none), task count, worker.
	Run: `
INSERT INTO stageq_schedule_runs (schedule_id, scheduled_for, outcome, process_id, task_count, worker_id)
VALUES (?, ?, ?, ?, ?, ?)`,

	// In: schedule id, next_run read before, new next_run, tick, outcome,
	// worker. The next_run predicate is a second fence behind the write lock.
	Advance: `
UPDATE stageq_schedules
   SET next_run = ?3, last_run = ?4, last_outcome = ?5, last_worker_id = ?6,
       last_fired_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
 WHERE id = ?1 AND next_run = ?2`,

	// In: schedule id, tick, outcome, worker. run-now leaves next_run alone.
	Touch: `
UPDATE stageq_schedules
   SET last_run = ?2, last_outcome = ?3, last_worker_id = ?4,
       last_fired_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
 WHERE id = ?1`,

	// In: schedule id, cut-off. A seek on the primary key; a run handled
	// after the cut-off stays however old its tick (a missed tick or a catch-up
	// run recorded after a long outage).
	PruneRuns: `DELETE FROM stageq_schedule_runs WHERE schedule_id = ?1 AND scheduled_for < ?2 AND fired_at < ?2`,

	// Out: the earliest unpaused next_run (NULL: none) and the database's now.
	NextDue: `SELECT min(next_run), ` + nowSQL + ` FROM stageq_schedules WHERE paused = 0`,

	// In: schedule name, limit. Out: its runs, newest first (reversed by the caller).
	RunList: `
SELECT r.scheduled_for, r.outcome, coalesce(r.process_id, 0), coalesce(p.name, ''), r.task_count, r.worker_id, r.fired_at
  FROM stageq_schedule_runs r JOIN stageq_schedules s ON s.id = r.schedule_id
  LEFT JOIN stageq_processes p ON p.id = r.process_id
 WHERE s.name = ?
 ORDER BY r.scheduled_for DESC
 LIMIT ?`,

	// Out: the database's now.
	ClockNow: `SELECT ` + nowSQL,
}

// isUnique reports a UNIQUE or PRIMARY KEY violation.
func isUnique(err error) bool {
	var se *msqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}
