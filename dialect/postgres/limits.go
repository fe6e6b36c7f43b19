package postgres

import "github.com/stageq/stageq/dialect/sqlbase"

// Limits live in stageq.limits (named keys and "kind:KIND") and in
// processes.max_parallel ("process:NAME"). None of them is a counter: the slots
// in use are the running tasks that match, counted by the claim under the limit
// row's lock (stageq.slot_check), so changing a row takes effect at the next
// claim and a crashed holder's slot returns exactly when its lease is rescued.

// limitSQL are the limit statements sqlbase runs (base.go).
var limitSQL = sqlbase.LimitStatements{
	MaxKey: 200, // limits.key's CHECK (migration 000001)
	// In: key, max. The NOTIFY wakes idle workers: a raised limit may admit work.
	Upsert: `
WITH up AS (
    INSERT INTO stageq.limits (key, max_running) VALUES ($1, $2)
    ON CONFLICT (key) DO UPDATE SET max_running = EXCLUDED.max_running, updated_at = now()
    RETURNING key
)
SELECT pg_notify('stageq_tasks', '') FROM up`,

	// In: key. Out: one row per limit removed (its count is the statement's).
	// The NOTIFY wakes idle workers, as Upsert's does: the tasks the limit
	// held back are now unlimited.
	Delete: `
WITH gone AS (
    DELETE FROM stageq.limits WHERE key = $1
    RETURNING key
)
SELECT pg_notify('stageq_tasks', '') FROM gone`,

	// A changed max_parallel (a process: limit) wakes idle workers likewise.
	Wake: `SELECT pg_notify('stageq_tasks', '')`,

	// List reads every limit with its slots in use. In: key ("" for all).
	List: `
SELECT l.key, l.max_running, l.updated_at,
       CASE WHEN l.key LIKE 'kind:%'
            THEN (SELECT count(*) FROM stageq.tasks t WHERE t.kind = substr(l.key, 6) AND t.state = 'running')
            ELSE (SELECT count(*) FROM stageq.tasks t WHERE t.limit_key = l.key AND t.state = 'running')
       END
  FROM stageq.limits l
 WHERE $1 = '' OR l.key = $1
UNION ALL
SELECT 'process:' || p.name, p.max_parallel, p.updated_at,
       (SELECT count(*) FROM stageq.tasks t WHERE t.process_id = p.id AND t.state = 'running')
  FROM stageq.processes p
 WHERE p.max_parallel IS NOT NULL AND ($1 = '' OR 'process:' || p.name = $1)
 ORDER BY 1`,
}
