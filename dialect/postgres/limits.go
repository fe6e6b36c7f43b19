package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/stageq/stageq/dialect"
)

// Limits live in stageq.limits (named keys and "kind:KIND") and in
// processes.max_parallel ("process:NAME"). None of them is a counter: the slots
// in use are the running tasks that match, counted by the claim under the limit
// row's lock (stageq.limit_admits), so changing a row takes effect at the next
// claim and a crashed holder's slot returns exactly when its lease is rescued.
const (
	// In: key, max. The NOTIFY wakes idle workers: a raised limit may admit work.
	limitUpsertSQL = `
WITH up AS (
    INSERT INTO stageq.limits (key, max_running) VALUES ($1, $2)
    ON CONFLICT (key) DO UPDATE SET max_running = EXCLUDED.max_running, updated_at = now()
    RETURNING key
)
SELECT pg_notify('stageq_tasks', '') FROM up`
	limitDeleteSQL = `DELETE FROM stageq.limits WHERE key = $1`

	// limitListSQL reads every limit with its slots in use. In: key ("" for all).
	limitListSQL = `
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
 ORDER BY 1`
)

// LimitSet implements dialect.Operator.
func (p *Postgres) LimitSet(ctx context.Context, key string, max int) error {
	if err := dialect.ValidateLimit(key, max); err != nil {
		return fmt.Errorf("set limit: %w", err)
	}
	if name, ok := strings.CutPrefix(key, dialect.LimitProcessPrefix); ok {
		return p.ProcessConfigure(ctx, nil, name, dialect.ProcessSettings{MaxParallel: &max})
	}
	if _, err := p.db.ExecContext(ctx, limitUpsertSQL, key, max); err != nil {
		return fmt.Errorf("set limit %q: %w", key, mapErr(err))
	}
	return nil
}

// LimitGet implements dialect.Operator.
func (p *Postgres) LimitGet(ctx context.Context, key string) (dialect.LimitInfo, error) {
	ls, err := p.limitList(ctx, key)
	if err != nil {
		return dialect.LimitInfo{}, err
	}
	if len(ls) == 0 {
		return dialect.LimitInfo{}, fmt.Errorf("limit %q: %w", key, dialect.ErrNotFound)
	}
	return ls[0], nil
}

// LimitList implements dialect.Operator.
func (p *Postgres) LimitList(ctx context.Context) ([]dialect.LimitInfo, error) {
	return p.limitList(ctx, "")
}

func (p *Postgres) limitList(ctx context.Context, key string) ([]dialect.LimitInfo, error) {
	rows, err := p.db.QueryContext(ctx, limitListSQL, key)
	if err != nil {
		return nil, fmt.Errorf("list limits: %w", mapErr(err))
	}
	defer rows.Close()
	var out []dialect.LimitInfo
	for rows.Next() {
		var l dialect.LimitInfo
		if err := rows.Scan(&l.Key, &l.Max, &l.UpdatedAt, &l.Running); err != nil {
			return nil, fmt.Errorf("list limits: %w", err)
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// LimitDelete implements dialect.Operator.
func (p *Postgres) LimitDelete(ctx context.Context, key string) error {
	if name, ok := strings.CutPrefix(key, dialect.LimitProcessPrefix); ok {
		if _, err := p.LimitGet(ctx, key); err != nil {
			return fmt.Errorf("delete limit: %w", err)
		}
		none := 0
		return p.ProcessConfigure(ctx, nil, name, dialect.ProcessSettings{MaxParallel: &none})
	}
	res, err := p.db.ExecContext(ctx, limitDeleteSQL, key)
	if err != nil {
		return fmt.Errorf("delete limit %q: %w", key, mapErr(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("delete limit %q: %w", key, err)
	} else if n == 0 {
		return fmt.Errorf("limit %q: %w", key, dialect.ErrNotFound)
	}
	return nil
}
