package postgres

import (
	"context"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// extendSQL pushes back the lease of every task worker $1 holds, by $2 ms from the
// database's now, and returns their ids. A task the worker believes it holds but
// that is missing here was rescued and must be abandoned by the worker.
const extendSQL = `
UPDATE stageq.tasks SET lease_expires_at = now() + $2 * interval '1 millisecond'
 WHERE worker_id = $1 AND state = 'running'
RETURNING id`

// TaskExtendLeases implements dialect.Dialect.
func (p *Postgres) TaskExtendLeases(ctx context.Context, ep dialect.ExtendParams) ([]int64, error) {
	rows, err := p.db.QueryContext(ctx, extendSQL, ep.WorkerID, ep.Lease.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("extend leases: %w", mapErr(err))
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("extend leases: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// rescueSQL calls stageq.rescue (migrations/postgres). In: rows per pass. Out:
// how many tasks it returned to the queue or failed.
const rescueSQL = `SELECT stageq.rescue($1)`

// TaskRescueExpired implements dialect.Dialect.
func (p *Postgres) TaskRescueExpired(ctx context.Context, rp dialect.RescueParams) (int, error) {
	var n int
	if err := p.db.QueryRowContext(ctx, rescueSQL, rp.Max).Scan(&n); err != nil {
		return 0, fmt.Errorf("rescue expired leases: %w", mapErr(err))
	}
	return n, nil
}
