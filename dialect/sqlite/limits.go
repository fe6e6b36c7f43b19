package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/dialect/sqlbase"
)

// Limits. Every function here runs inside the caller's write
// transaction (BEGIN IMMEDIATE), which is SQLite's equivalent of PostgreSQL's
// process-row and limit-row locks: nothing changes between a count and the claim
// that relies on it.
const (
	limitMaxSQL         = `SELECT max_running FROM stageq_limits WHERE key = ?`
	limitRunningKeySQL  = `SELECT count(*) FROM stageq_tasks WHERE limit_key = ? AND state = 'running'`
	limitRunningKindSQL = `SELECT count(*) FROM stageq_tasks WHERE kind = ? AND state = 'running'`
)

// limitSQL are the limit statements sqlbase runs (base.go).
var limitSQL = sqlbase.LimitStatements{
	MaxKey: 200, // stageq_limits.key's CHECK (migration 000001)
	Upsert: `
INSERT INTO stageq_limits (key, max_running) VALUES (?, ?)
ON CONFLICT (key) DO UPDATE SET max_running = excluded.max_running, updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')`,

	Delete: `DELETE FROM stageq_limits WHERE key = ?`,

	// In: key ("" for all).
	List: `
SELECT l.key, l.max_running, l.updated_at,
       CASE WHEN l.key LIKE 'kind:%'
            THEN (SELECT count(*) FROM stageq_tasks t WHERE t.kind = substr(l.key, 6) AND t.state = 'running')
            ELSE (SELECT count(*) FROM stageq_tasks t WHERE t.limit_key = l.key AND t.state = 'running')
       END
  FROM stageq_limits l
 WHERE ?1 = '' OR l.key = ?1
UNION ALL
SELECT 'process:' || p.name, p.max_parallel, p.updated_at,
       (SELECT count(*) FROM stageq_tasks t WHERE t.process_id = p.id AND t.state = 'running')
  FROM stageq_processes p
 WHERE p.max_parallel IS NOT NULL AND (?1 = '' OR 'process:' || p.name = ?1)
 ORDER BY 1`,
}

// limitAdmits says whether one more task with limit key key ("" for none) and
// kind kind may start now, counting the running tasks that hold the slots.
func limitAdmits(ctx context.Context, q dialect.Querier, key, kind string) (bool, error) {
	check := func(limitKey, countSQL, arg string) (bool, error) {
		var max int64
		err := q.QueryRowContext(ctx, limitMaxSQL, limitKey).Scan(&max)
		if errors.Is(err, sql.ErrNoRows) {
			return true, nil // no limit row: unlimited
		}
		if err != nil {
			return false, fmt.Errorf("limit %q: %w", limitKey, mapErr(err))
		}
		var n int64
		if err := q.QueryRowContext(ctx, countSQL, arg).Scan(&n); err != nil {
			return false, fmt.Errorf("limit %q: %w", limitKey, mapErr(err))
		}
		return n < max, nil
	}
	if key != "" {
		if ok, err := check(key, limitRunningKeySQL, key); err != nil || !ok {
			return false, err
		}
	}
	return check(dialect.LimitKindPrefix+kind, limitRunningKindSQL, kind)
}
