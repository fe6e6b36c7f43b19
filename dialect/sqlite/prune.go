package sqlite

import (
	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/dialect/sqlbase"
)

var _ dialect.Pruner = (*SQLite)(nil)

// pruneCutoffSQL reads the cut-off time of a retention age (pruneCutoff).
const pruneCutoffSQL = `SELECT strftime('%Y-%m-%d %H:%M:%f', 'now', ?)`

// retentionSQL are the prune statements sqlbase runs (base.go). In: the
// cut-off time (UTC text, from the database's clock), batch size. Each deletes
// one batch in its own short write transaction.
var retentionSQL = sqlbase.RetentionStatements{
	Logs: `
DELETE FROM stageq_logs WHERE id IN (
    SELECT id FROM stageq_logs WHERE started_at < ?1 AND outcome <> 'running' ORDER BY started_at LIMIT ?2)`,

	Workers: `
DELETE FROM stageq_workers WHERE id IN (
    SELECT w.id FROM stageq_workers w
     WHERE coalesce(w.stopped_at, w.heartbeat_at) < ?1
       AND NOT EXISTS (SELECT 1 FROM stageq_tasks t WHERE t.worker_id = w.id AND t.state = 'running')
     LIMIT ?2)`,

	Processes: `
DELETE FROM stageq_processes WHERE id IN (
    SELECT p.id FROM stageq_processes p
     WHERE p.finished_at < ?1 AND p.state IN ('succeeded', 'cancelled') AND p.name <> 'default'
       AND NOT EXISTS (SELECT 1 FROM stageq_tasks t WHERE t.process_id = p.id)
     ORDER BY p.finished_at LIMIT ?2)`,

	Record: `
INSERT INTO stageq_prune_status (id, worker_id, ran_at, logs_deleted, workers_deleted, processes_deleted,
                                 retain_logs_s, retain_workers_s, retain_processes_s)
VALUES (1, ?1, strftime('%Y-%m-%d %H:%M:%f', 'now'), ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (id) DO UPDATE SET worker_id = excluded.worker_id, ran_at = excluded.ran_at,
    logs_deleted = excluded.logs_deleted, workers_deleted = excluded.workers_deleted,
    processes_deleted = excluded.processes_deleted, retain_logs_s = excluded.retain_logs_s,
    retain_workers_s = excluded.retain_workers_s, retain_processes_s = excluded.retain_processes_s`,

	Last: `
SELECT worker_id, ran_at, logs_deleted, workers_deleted, processes_deleted,
       retain_logs_s, retain_workers_s, retain_processes_s
  FROM stageq_prune_status WHERE id = 1`,
}
