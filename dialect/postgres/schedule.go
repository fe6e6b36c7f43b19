package postgres

import "github.com/stageq/stageq/dialect/sqlbase"

// scheduleColumns is the column list every schedule read returns, in the order
// dialect.ScanSchedule expects. sqlbase runs the statements (base.go).
const scheduleColumns = `id, name, coalesce(cron, ''), coalesce(interval_ms, 0), plan, missed, grace_ms,
       singleton, paused, next_run, last_run, coalesce(last_outcome, ''), coalesce(last_worker_id, ''), last_fired_at`

// scheduleSQL are the schedule statements sqlbase runs (base.go).
var scheduleSQL = sqlbase.ScheduleStatements{
	// In: name, cron (NULL for an interval), interval ms (NULL for cron), plan JSON,
	// missed policy, grace ms, singleton, paused, first next_run. Out: the id.
	Create: `
INSERT INTO stageq.schedules (name, cron, interval_ms, plan, missed, grace_ms, singleton, paused, next_run)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
RETURNING id`,

	// In: name (empty for all).
	List: `SELECT ` + scheduleColumns + `
  FROM stageq.schedules WHERE ($1 = '' OR name = $1) ORDER BY name`,

	// In: name, paused.
	Pause: `UPDATE stageq.schedules SET paused = $2, updated_at = now() WHERE name = $1`,

	Delete: `DELETE FROM stageq.schedules WHERE name = $1`,

	// LockDue locks the earliest due schedule no one else holds. SKIP
	// LOCKED lets racing workers pass over it instead of queueing behind it; a row
	// another worker advanced and committed meanwhile is re-checked against next_run
	// <= now() and drops out. Out: the schedule and the database's now.
	LockDue: `SELECT ` + scheduleColumns + `, now()
  FROM stageq.schedules
 WHERE NOT paused AND next_run <= now()
 ORDER BY next_run
 LIMIT 1
   FOR UPDATE SKIP LOCKED`,

	// In: name. Out: the schedule and the database's now; waits for other holders.
	Lock: `SELECT ` + scheduleColumns + `, now()
  FROM stageq.schedules WHERE name = $1 FOR UPDATE`,

	// A seek on tasks_schedule.
	Unfinished: `SELECT EXISTS (SELECT 1 FROM stageq.tasks WHERE schedule_name = $1)`,

	// In: schedule name, tick, task ids.
	Tag: `
UPDATE stageq.tasks SET schedule_name = $1, scheduled_for = $2 WHERE id = ANY($3::bigint[])`,

	// In: schedule id, tick, outcome, process id (NULL: none), task count, worker.
	Run: `
INSERT INTO stageq.schedule_runs (schedule_id, scheduled_for, outcome, process_id, task_count, worker_id)
VALUES ($1, $2, $3, $4, $5, $6)`,

	// In: schedule id, next_run read under the lock, new next_run, tick, outcome,
	// worker. The next_run predicate is a second fence behind the row lock.
	Advance: `
UPDATE stageq.schedules
   SET next_run = $3, last_run = $4, last_outcome = $5, last_worker_id = $6, last_fired_at = now(),
       updated_at = now()
 WHERE id = $1 AND next_run = $2`,

	// In: schedule id, tick, outcome, worker. run-now leaves next_run alone.
	Touch: `
UPDATE stageq.schedules
   SET last_run = $2, last_outcome = $3, last_worker_id = $4, last_fired_at = now(), updated_at = now()
 WHERE id = $1`,

	// In: schedule id, cut-off. A seek on the primary key; a run handled
	// after the cut-off stays however old its tick (a missed tick or a catch-up
	// run recorded after a long outage).
	PruneRuns: `DELETE FROM stageq.schedule_runs WHERE schedule_id = $1 AND scheduled_for < $2 AND fired_at < $2`,

	// Out: the earliest unpaused next_run (NULL: none) and the database's now. A
	// seek on schedules_due.
	NextDue: `SELECT min(next_run), now() FROM stageq.schedules WHERE NOT paused`,

	// Out: the database's now.
	ClockNow: `SELECT now()`,

	// In: schedule name, limit. Out: its runs, newest first (reversed by the caller).
	RunList: `
SELECT r.scheduled_for, r.outcome, coalesce(r.process_id, 0), coalesce(p.name, ''), r.task_count, r.worker_id, r.fired_at
  FROM stageq.schedule_runs r JOIN stageq.schedules s ON s.id = r.schedule_id
  LEFT JOIN stageq.processes p ON p.id = r.process_id
 WHERE s.name = $1
 ORDER BY r.scheduled_for DESC
 LIMIT $2`,
}
