package postgres

import (
	"context"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// claimSQL leases up to $1 tasks of the kinds $5 (NULL: any) to worker $2 with
// token $3 for $4 ms, and opens their Logs rows, in one statement.
//
// claim (routines/postgres/40_claim.sql; its design is told in
// migrations/postgres/000002_hot_path.up.sql and 000007_claim_kinds) locks no
// shared row: fairness is in each available task's virtual time, stamped when
// the task became available, so the claim takes the lowest virtual times of
// the highest priority with FOR UPDATE SKIP LOCKED in one UPDATE per priority
// level. Only when a concurrency limit or a capped
// process exists does it go through claim_gated, which locks the limit
// rows. It returns each task with its process's name, read inside the function:
// this statement's own snapshot is older than the function's and may not see a
// process created meanwhile (migration 7 says how that lost tasks).
const claimSQL = `
WITH claimed AS (
    SELECT * FROM stageq_routines.claim($1, $2, $3, $4, $5)
), logged AS (
    INSERT INTO stageq.logs (task_id, process_id, process_name, execution_order, kind, body,
                             worker_id, attempt, lease_token, schedule_name, scheduled_for)
    SELECT id, process_id, process_name, execution_order, kind, body, $2, attempt, $3,
           schedule_name, scheduled_for FROM claimed
)
SELECT id, process_id, process_name, execution_order, kind, body, attempt, max_attempts, atomic, abandons
  FROM claimed ORDER BY id`

// TaskClaim implements dialect.Dialect.
func (p *Postgres) TaskClaim(ctx context.Context, cp dialect.ClaimParams) ([]dialect.ClaimedTask, error) {
	rows, err := p.db.QueryContext(ctx, p.calls.SQL(claimSQL), cp.Max, cp.WorkerID, cp.Token, cp.Lease.Milliseconds(), kindsArray(cp.Kinds))
	if err != nil {
		return nil, fmt.Errorf("claim: %w", mapErr(err))
	}
	defer rows.Close()
	var out []dialect.ClaimedTask
	for rows.Next() {
		t := dialect.ClaimedTask{Token: cp.Token}
		if err := rows.Scan(&t.ID, &t.ProcessID, &t.Process, &t.Order, &t.Kind, &t.Body,
			&t.Attempt, &t.MaxAttempts, &t.Atomic, &t.Abandons); err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim: %w", mapErr(err))
	}
	return out, nil
}

// kindsArray passes a claim's kinds as text[]; nil is SQL NULL (every kind).
func kindsArray(kinds []string) any {
	if kinds == nil {
		return nil
	}
	return kinds
}
