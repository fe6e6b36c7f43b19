package postgres

import (
	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/dialect/sqlbase"
)

var _ dialect.Pruner = (*Postgres)(nil)

// retentionSQL are the prune statements sqlbase runs (base.go). In: age in
// milliseconds, batch size. Each deletes one batch of rows no other
// transaction holds (SKIP LOCKED), oldest first along an index, in its own
// short transaction.
var retentionSQL = sqlbase.RetentionStatements{
	Logs: `
DELETE FROM stageq.logs WHERE id IN (
    SELECT id FROM stageq.logs
     WHERE started_at < now() - $1 * interval '1 millisecond' AND outcome <> 'running'
     ORDER BY started_at LIMIT $2 FOR UPDATE SKIP LOCKED)`,

	Workers: `
DELETE FROM stageq.workers WHERE id IN (
    SELECT w.id FROM stageq.workers w
     WHERE coalesce(w.stopped_at, w.heartbeat_at) < now() - $1 * interval '1 millisecond'
       AND NOT EXISTS (SELECT 1 FROM stageq.tasks t WHERE t.worker_id = w.id AND t.state = 'running')
     LIMIT $2 FOR UPDATE SKIP LOCKED)`,

	// A process row is locked by submit and by every task change, so one being
	// filled again is skipped; a process found empty under the lock stays empty
	// until this deletion commits.
	Processes: `
DELETE FROM stageq.processes WHERE id IN (
    SELECT p.id FROM stageq.processes p
     WHERE p.finished_at < now() - $1 * interval '1 millisecond'
       AND p.state IN ('succeeded', 'cancelled') AND p.name <> 'default'
       AND NOT EXISTS (SELECT 1 FROM ` + tasksOf("p.id") + ` t)
     ORDER BY p.finished_at LIMIT $2 FOR UPDATE SKIP LOCKED)`,

	Record: `
INSERT INTO stageq.prune_status AS s (id, ` + sqlbase.PruneStatusCols + `)
VALUES (1, $1, now(), $2, $3, $4, $5, $6, $7)
ON CONFLICT (id) DO UPDATE SET ` + sqlbase.PruneStatusUpsertSet,

	Last: `SELECT ` + sqlbase.PruneStatusCols + ` FROM stageq.prune_status WHERE id = 1`,
}
