package sqlite

import (
	"context"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// claimSQL leases up to ? available tasks. It runs under BEGIN IMMEDIATE, so no
// other writer runs between reading the candidates and leasing them. Only
// 'available' tasks are candidates, found by a seek on stageq_tasks_claim.
// In: worker, token, lease offset, now, limit.
const claimSQL = `
UPDATE stageq_tasks
   SET state = 'running', attempt = attempt + 1, worker_id = ?, lease_token = ?,
       lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?)
 WHERE id IN (SELECT id FROM stageq_tasks
               WHERE state = 'available' AND run_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
               ORDER BY priority DESC, run_at, id
               LIMIT ?)
RETURNING id, process_id, execution_order, kind, body, attempt, max_attempts, atomic`

// claimLogSQL opens the Logs rows of the tasks a claim just leased (by token).
const claimLogSQL = `
INSERT INTO stageq_logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt, lease_token)
SELECT t.id, t.process_id, p.name, t.execution_order, t.kind, t.body, t.worker_id, t.attempt, t.lease_token
  FROM stageq_tasks t JOIN stageq_processes p ON p.id = t.process_id
 WHERE t.lease_token = ? AND t.worker_id = ? AND t.state = 'running'
RETURNING task_id, process_name`

// TaskClaim implements dialect.Dialect.
func (s *SQLite) TaskClaim(ctx context.Context, cp dialect.ClaimParams) ([]dialect.ClaimedTask, error) {
	var out []dialect.ClaimedTask
	err := s.inTx(ctx, nil, func(q dialect.Querier) error {
		rows, err := q.QueryContext(ctx, claimSQL, cp.WorkerID, cp.Token, offset(cp.Lease), cp.Max)
		if err != nil {
			return fmt.Errorf("claim: %w", mapErr(err))
		}
		index := map[int64]int{}
		for rows.Next() {
			t := dialect.ClaimedTask{Token: cp.Token}
			if err := rows.Scan(&t.ID, &t.ProcessID, &t.Order, &t.Kind, &t.Body, &t.Attempt, &t.MaxAttempts, &t.Atomic); err != nil {
				rows.Close()
				return fmt.Errorf("claim: %w", err)
			}
			index[t.ID] = len(out)
			out = append(out, t)
		}
		if err := rows.Close(); err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		if len(out) == 0 {
			return nil
		}
		rows, err = q.QueryContext(ctx, claimLogSQL, cp.Token, cp.WorkerID)
		if err != nil {
			return fmt.Errorf("claim: log start: %w", mapErr(err))
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var name string
			if err := rows.Scan(&id, &name); err != nil {
				return fmt.Errorf("claim: log start: %w", err)
			}
			if i, ok := index[id]; ok {
				out[i].Process = name
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
