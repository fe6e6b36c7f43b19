package postgres

// scheduleColumns is the column list every schedule read returns, in the order
// dialect.ScanSchedule expects. sqlbase runs the statements (base.go).
const scheduleColumns = `id, name, coalesce(cron, ''), coalesce(interval_ms, 0), plan, missed, grace_ms,
       singleton, paused, next_run, last_run, coalesce(last_outcome, ''), coalesce(last_worker_id, ''), last_fired_at`

// In: name, cron (NULL for an interval), interval ms (NULL for cron), plan JSON,
// missed policy, grace ms, singleton, paused, first next_run. Out: the id.
const scheduleCreateSQL = `
INSERT INTO stageq.schedules (name, cron, interval_ms, plan, missed, grace_ms, singleton, paused, next_run)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
RETURNING id`

// In: name (empty for all).
const scheduleListSQL = `SELECT ` + scheduleColumns + `
  FROM stageq.schedules WHERE ($1 = '' OR name = $1) ORDER BY name`

// In: name, paused.
const schedulePauseSQL = `UPDATE stageq.schedules SET paused = $2, updated_at = now() WHERE name = $1`

const scheduleDeleteSQL = `DELETE FROM stageq.schedules WHERE name = $1`

// scheduleLockDueSQL locks the earliest due schedule no one else holds. SKIP
// LOCKED lets racing workers pass over it instead of queueing behind it; a row
// another worker advanced and committed meanwhile is re-checked against next_run
// <= now() and drops out. Out: the schedule and the database's now.
const scheduleLockDueSQL = `SELECT ` + scheduleColumns + `, now()
  FROM stageq.schedules
 WHERE NOT paused AND next_run <= now()
 ORDER BY next_run
 LIMIT 1
   FOR UPDATE SKIP LOCKED`

// In: name. Out: the schedule and the database's now; waits for other holders.
const scheduleLockSQL = `SELECT ` + scheduleColumns + `, now()
  FROM stageq.schedules WHERE name = $1 FOR UPDATE`

// A seek on tasks_schedule.
const scheduleUnfinishedSQL = `SELECT EXISTS (SELECT 1 FROM stageq.tasks WHERE schedule_name = $1)`

const (
	// In: schedule name, tick, task ids.
	scheduleTagSQL = `
UPDATE stageq.tasks SET schedule_name = $1, scheduled_for = $2 WHERE id = ANY($3::bigint[])`
	// In: schedule id, tick, outcome, process id (NULL: none), task count, worker.
	scheduleRunSQL = `
INSERT INTO stageq.schedule_runs (schedule_id, scheduled_for, outcome, process_id, task_count, worker_id)
VALUES ($1, $2, $3, $4, $5, $6)`
	// In: schedule id, next_run read under the lock, new next_run, tick, outcome,
	// worker. The next_run predicate is a second fence behind the row lock.
	scheduleAdvanceSQL = `
UPDATE stageq.schedules
   SET next_run = $3, last_run = $4, last_outcome = $5, last_worker_id = $6, last_fired_at = now(),
       updated_at = now()
 WHERE id = $1 AND next_run = $2`
	// In: schedule id, tick, outcome, worker. run-now leaves next_run alone.
	scheduleTouchSQL = `
UPDATE stageq.schedules
   SET last_run = $2, last_outcome = $3, last_worker_id = $4, last_fired_at = now(), updated_at = now()
 WHERE id = $1`
	// In: schedule id, cut-off. A seek on the primary key.
	schedulePruneSQL = `DELETE FROM stageq.schedule_runs WHERE schedule_id = $1 AND scheduled_for < $2`
)

// Out: the earliest unpaused next_run (NULL: none) and the database's now. A
// seek on schedules_due.
const scheduleNextDueSQL = `SELECT min(next_run), now() FROM stageq.schedules WHERE NOT paused`

// Out: the database's now.
const clockNowSQL = `SELECT now()`

// In: schedule name, limit. Out: its runs, newest first (reversed by the caller).
const scheduleRunListSQL = `
SELECT r.scheduled_for, r.outcome, coalesce(r.process_id, 0), r.task_count, r.worker_id, r.fired_at
  FROM stageq.schedule_runs r JOIN stageq.schedules s ON s.id = r.schedule_id
 WHERE s.name = $1
 ORDER BY r.scheduled_for DESC
 LIMIT $2`
