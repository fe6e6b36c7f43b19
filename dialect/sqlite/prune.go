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
INSERT INTO stageq_prune_status (id, ` + sqlbase.PruneStatusCols + `)
VALUES (1, ?1, strftime('%Y-%m-%d %H:%M:%f', 'now'), ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (id) DO UPDATE SET ` + sqlbase.PruneStatusUpsertSet,

	Last: `SELECT ` + sqlbase.PruneStatusCols + ` FROM stageq_prune_status WHERE id = 1`,
}
