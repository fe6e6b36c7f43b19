package postgres

import (
	"context"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// extendSQL pushes back, by $2 ms from the database's now, the leases of the
// attempts worker $1 names (task ids $3 with tokens $4) and returns those it still
// holds. One missing from the answer was rescued: the worker abandons it. The
// lease is tested as finish_many tests it (routines/postgres/50_finish.sql says
// why: with state = 'running' beside the join, the planner may walk every
// running task once per task named).
//
// A task row another transaction holds (an operator's, or an application's
// SELECT ... FOR UPDATE) is skipped, not waited for: one locked row would
// otherwise hold back the extension of every other lease of the worker, past
// their expiry, and the worker would abandon attempts that ran well. A
// skipped one is answered as still held only while its last committed
// version is the worker's and at least half a lease of it is left: the next
// beat, a third of a lease away at most, may extend it. Past that it is
// answered as lost, and the worker stops its attempt before the lease ends
// (a rescue may free the task once the row is let go: its body must not run
// on beside another worker's).
const extendSQL = `
WITH h AS (
    SELECT * FROM unnest($3::bigint[], $4::bigint[]) AS h(id, token)
), mine AS (
    SELECT t.id FROM stageq.tasks t JOIN h ON t.id = h.id
     WHERE CASE WHEN t.state = 'running' THEN t.lease_token END = h.token AND t.worker_id = $1
       FOR UPDATE OF t SKIP LOCKED
), extended AS (
    UPDATE stageq.tasks t SET lease_expires_at = now() + $2 * interval '1 millisecond'
      FROM mine WHERE t.id = mine.id
    RETURNING t.id, t.lease_token
)
SELECT id, lease_token FROM extended
UNION ALL
SELECT t.id, t.lease_token FROM stageq.tasks t JOIN h ON t.id = h.id
 WHERE CASE WHEN t.state = 'running' THEN t.lease_token END = h.token AND t.worker_id = $1
   AND t.id NOT IN (SELECT id FROM mine)
   AND t.lease_expires_at > now() + $2 * interval '1 millisecond' / 2`

// TaskExtendLeases implements dialect.Dialect.
func (p *Postgres) TaskExtendLeases(ctx context.Context, ep dialect.ExtendParams) ([]dialect.TaskLease, error) {
	ids := make([]int64, len(ep.Tasks))
	tokens := make([]int64, len(ep.Tasks))
	for i, t := range ep.Tasks {
		ids[i], tokens[i] = t.ID, t.Token
	}
	held, err := dialect.QueryAll(ctx, p.db, mapErr, extendSQL, dialect.ScanTaskLease, ep.WorkerID, ep.Lease.Milliseconds(), ids, tokens)
	if err != nil {
		return nil, fmt.Errorf("extend leases: %w", err)
	}
	return held, nil
}

// rescueSQL calls rescue (routines/postgres/60_rescue.sql). In: rows per pass. Out:
// how many tasks it returned to the queue, failed, or removed (their process gone).
const rescueSQL = `SELECT stageq_routines.rescue($1)`

// TaskRescueExpired implements dialect.Dialect.
func (p *Postgres) TaskRescueExpired(ctx context.Context, rp dialect.RescueParams) (int, error) {
	var n int
	if err := p.db.QueryRowContext(ctx, p.calls.SQL(rescueSQL), rp.Max).Scan(&n); err != nil {
		return 0, fmt.Errorf("rescue expired leases: %w", mapErr(err))
	}
	return n, nil
}
