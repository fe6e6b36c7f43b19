package postgres

import (
	"context"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// claimSQL leases up to $1 available tasks to worker $2 with token $3 for $4 ms,
// and opens their Logs rows, in one statement.
//
// FOR UPDATE SKIP LOCKED takes row locks as it reads and passes over rows other
// claims hold, so two workers never get the same task. Only 'available' tasks are
// candidates and the partial index tasks_claim holds nothing else, so the claim is
// an index seek however many tasks wait blocked behind a running stage.
const claimSQL = `
WITH picked AS (
    SELECT id FROM stageq.tasks
     WHERE state = 'available' AND run_at <= now()
     ORDER BY priority DESC, run_at, id
     LIMIT $1
       FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE stageq.tasks t
       SET state = 'running', attempt = t.attempt + 1, worker_id = $2, lease_token = $3,
           lease_expires_at = now() + $4 * interval '1 millisecond'
      FROM picked
     WHERE t.id = picked.id
 RETURNING t.id, t.process_id, t.execution_order, t.kind, t.body, t.attempt, t.max_attempts, t.atomic
), named AS (
    SELECT c.*, p.name AS process_name
      FROM claimed c JOIN stageq.processes p ON p.id = c.process_id
), logged AS (
    INSERT INTO stageq.logs (task_id, process_id, process_name, execution_order, kind, body,
                             worker_id, attempt, lease_token)
    SELECT id, process_id, process_name, execution_order, kind, body, $2, attempt, $3 FROM named
)
SELECT id, process_id, process_name, execution_order, kind, body, attempt, max_attempts, atomic
  FROM named ORDER BY id`

// TaskClaim implements dialect.Dialect.
func (p *Postgres) TaskClaim(ctx context.Context, cp dialect.ClaimParams) ([]dialect.ClaimedTask, error) {
	rows, err := p.db.QueryContext(ctx, claimSQL, cp.Max, cp.WorkerID, cp.Token, cp.Lease.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("claim: %w", mapErr(err))
	}
	defer rows.Close()
	var out []dialect.ClaimedTask
	for rows.Next() {
		t := dialect.ClaimedTask{Token: cp.Token}
		if err := rows.Scan(&t.ID, &t.ProcessID, &t.Process, &t.Order, &t.Kind, &t.Body,
			&t.Attempt, &t.MaxAttempts, &t.Atomic); err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim: %w", mapErr(err))
	}
	return out, nil
}
