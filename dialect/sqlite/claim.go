package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// The claim runs under BEGIN IMMEDIATE, so no other writer runs between its reads
// and writes and it needs no row locks. It makes the same decisions as
// PostgreSQL's stageq.claim: each round serves the runnable process with the
// highest priority and lowest stride-scheduling pass (a seek on
// stageq_processes_queue, which holds runnable processes only), takes one of its
// available tasks that the limits admit (a seek on stageq_tasks_claim_process)
// and advances its pass by 1,000,000 / weight.
const (
	// In: processes already passed over in this claim (JSON array). Out: id, weight.
	claimNextProcessSQL = `
SELECT id, weight FROM stageq_processes
 WHERE runnable = 1 AND ready_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
   AND id NOT IN (SELECT value FROM json_each(?))
 ORDER BY priority DESC, pass, id
 LIMIT 1`
	// In: process. Out: up to 8 candidates in the process's own order. INDEXED BY:
	// left to itself the planner may prefer stageq_tasks_ready's range on run_at
	// and then sort every available task of the process, on every claim.
	claimCandidatesSQL = `
SELECT id, kind, limit_key FROM stageq_tasks INDEXED BY stageq_tasks_claim_process
 WHERE process_id = ? AND state = 'available' AND run_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
 ORDER BY priority DESC, run_at, id
 LIMIT 8`
	// In: worker, token, lease offset, task id.
	claimTaskSQL = `
UPDATE stageq_tasks
   SET state = 'running', attempt = attempt + 1, worker_id = ?, lease_token = ?,
       lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?)
 WHERE id = ?
RETURNING id, process_id, execution_order, kind, body, attempt, max_attempts, atomic`
	// In: stride, process.
	claimAdvanceSQL = `UPDATE stageq_processes SET pass = pass + ? WHERE id = ?`
	// A process with nothing it may start loses its turn and goes to the end of
	// the current round; idempotent, so waiting never inflates its pass.
	// In: stride, process.
	claimPassOverSQL = `
UPDATE stageq_processes
   SET pass = max(pass, coalesce((SELECT pass FROM stageq_processes WHERE runnable = 1 ORDER BY pass LIMIT 1), pass) + ?1)
 WHERE id = ?2`
)

// claimRoundsExtra bounds the processes one claim examines beyond its maximum,
// so a run queue headed by processes waiting on full limits costs a bounded amount.
const claimRoundsExtra = 8

// claimLogSQL opens the Logs rows of the tasks a claim just leased (by token).
const claimLogSQL = `
INSERT INTO stageq_logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt, lease_token,
                         schedule_name, scheduled_for)
SELECT t.id, t.process_id, p.name, t.execution_order, t.kind, t.body, t.worker_id, t.attempt, t.lease_token,
       t.schedule_name, t.scheduled_for
  FROM stageq_tasks t JOIN stageq_processes p ON p.id = t.process_id
 WHERE t.lease_token = ? AND t.worker_id = ? AND t.state = 'running'
RETURNING task_id, process_name`

// TaskClaim implements dialect.Dialect.
func (s *SQLite) TaskClaim(ctx context.Context, cp dialect.ClaimParams) ([]dialect.ClaimedTask, error) {
	var out []dialect.ClaimedTask
	err := s.inTx(ctx, nil, func(q dialect.Querier) error {
		index := map[int64]int{}
		skip := []int64{}
		for round := 0; len(out) < cp.Max && round < cp.Max+claimRoundsExtra; round++ {
			skipJSON, _ := json.Marshal(skip)
			var pid int64
			var weight int
			err := q.QueryRowContext(ctx, claimNextProcessSQL, string(skipJSON)).Scan(&pid, &weight)
			if errors.Is(err, sql.ErrNoRows) {
				break
			}
			if err != nil {
				return fmt.Errorf("claim: next process: %w", mapErr(err))
			}
			t, got, err := s.claimOne(ctx, q, cp, pid)
			if err != nil {
				return err
			}
			stride := 1_000_000 / int64(weight)
			if got {
				index[t.ID] = len(out)
				out = append(out, t)
				_, err = q.ExecContext(ctx, claimAdvanceSQL, stride, pid)
			} else {
				skip = append(skip, pid)
				_, err = q.ExecContext(ctx, claimPassOverSQL, stride, pid)
			}
			if err != nil {
				return fmt.Errorf("claim: advance process %d: %w", pid, mapErr(err))
			}
			if err := refreshProcess(ctx, q, pid); err != nil {
				return fmt.Errorf("claim: %w", err)
			}
		}
		if len(out) == 0 {
			return nil
		}
		rows, err := q.QueryContext(ctx, claimLogSQL, cp.Token, cp.WorkerID)
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

// claimOne leases the first candidate of a process that the limits admit.
func (s *SQLite) claimOne(ctx context.Context, q dialect.Querier, cp dialect.ClaimParams, pid int64) (dialect.ClaimedTask, bool, error) {
	type candidate struct {
		id       int64
		kind     string
		limitKey sql.NullString
	}
	rows, err := q.QueryContext(ctx, claimCandidatesSQL, pid)
	if err != nil {
		return dialect.ClaimedTask{}, false, fmt.Errorf("claim: candidates of process %d: %w", pid, mapErr(err))
	}
	var cands []candidate
	for rows.Next() {
		var c candidate
		if err := rows.Scan(&c.id, &c.kind, &c.limitKey); err != nil {
			rows.Close()
			return dialect.ClaimedTask{}, false, fmt.Errorf("claim: %w", err)
		}
		cands = append(cands, c)
	}
	if err := rows.Close(); err != nil {
		return dialect.ClaimedTask{}, false, fmt.Errorf("claim: %w", mapErr(err))
	}
	for _, c := range cands {
		ok, err := limitAdmits(ctx, q, c.limitKey.String, c.kind)
		if err != nil {
			return dialect.ClaimedTask{}, false, fmt.Errorf("claim: %w", err)
		}
		if !ok {
			continue
		}
		t := dialect.ClaimedTask{Token: cp.Token}
		if err := q.QueryRowContext(ctx, claimTaskSQL, cp.WorkerID, cp.Token, offset(cp.Lease), c.id).Scan(
			&t.ID, &t.ProcessID, &t.Order, &t.Kind, &t.Body, &t.Attempt, &t.MaxAttempts, &t.Atomic); err != nil {
			return dialect.ClaimedTask{}, false, fmt.Errorf("claim: lease task %d: %w", c.id, mapErr(err))
		}
		return t, true, nil
	}
	return dialect.ClaimedTask{}, false, nil
}
