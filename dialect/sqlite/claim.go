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
// PostgreSQL's stageq.claim: each turn serves the runnable process at the head
// of the run queue (highest priority, then lowest stride-scheduling pass: a
// seek on stageq_processes_queue, which holds runnable processes only) and
// takes its share in one go: all that is asked when no other process of its
// priority is runnable, otherwise the tasks it may take before its pass passes
// the next one's, floor((next pass - pass) / stride) + 1, capped by its
// max_parallel. The pass then advances by that many strides (1,000,000 / weight).
const (
	// Is any limit row defined? Without one every task is admitted, and a turn
	// takes its share with one UPDATE.
	claimLimitsSQL = `SELECT EXISTS (SELECT 1 FROM stageq_limits)`
	// In: processes already passed over in this claim (JSON array).
	// Out: id, priority, pass, weight, max_parallel.
	claimNextProcessSQL = `
SELECT id, priority, pass, weight, max_parallel FROM stageq_processes
 WHERE runnable = 1 AND ready_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
   AND id NOT IN (SELECT value FROM json_each(?))
 ORDER BY priority DESC, pass, id
 LIMIT 1`
	// The pass of the process that would be served after this one at the same
	// priority. In: priority, process, skipped processes (JSON array).
	claimNextPassSQL = `
SELECT pass FROM stageq_processes
 WHERE runnable = 1 AND ready_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
   AND priority = ? AND id <> ? AND id NOT IN (SELECT value FROM json_each(?))
 ORDER BY priority DESC, pass, id
 LIMIT 1`
	// In: process.
	claimRunningSQL = `SELECT count(*) FROM stageq_tasks WHERE process_id = ? AND state = 'running'`
	// The fast path (no limit rows): a turn's whole share in one statement.
	// In: worker, token, lease offset, process, share. INDEXED BY: see below.
	// LIMIT CAST(? AS INTEGER), not LIMIT ?: SQLite plans a bare bound LIMIT
	// with its value and then re-prepares the statement every time the value is
	// bound again, which a cached statement is here to avoid.
	claimShareSQL = `
UPDATE stageq_tasks
   SET state = 'running', attempt = attempt + 1, worker_id = ?, lease_token = ?,
       lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?)
 WHERE id IN (SELECT id FROM stageq_tasks INDEXED BY stageq_tasks_claim_process
               WHERE process_id = ? AND state = 'available' AND run_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
               ORDER BY priority DESC, run_at, id
               LIMIT CAST(? AS INTEGER))
RETURNING id, process_id, execution_order, kind, body, attempt, max_attempts, atomic`
	// In: process, how many. Out: candidates in the process's own order. INDEXED
	// BY: left to itself the planner may prefer stageq_tasks_ready's range on
	// run_at and then sort every available task of the process, on every claim.
	claimCandidatesSQL = `
SELECT id, kind, limit_key FROM stageq_tasks INDEXED BY stageq_tasks_claim_process
 WHERE process_id = ? AND state = 'available' AND run_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
 ORDER BY priority DESC, run_at, id
 LIMIT CAST(? AS INTEGER)`
	// In: worker, token, lease offset, task id.
	claimTaskSQL = `
UPDATE stageq_tasks
   SET state = 'running', attempt = attempt + 1, worker_id = ?, lease_token = ?,
       lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?)
 WHERE id = ?
RETURNING id, process_id, execution_order, kind, body, attempt, max_attempts, atomic`
	// In: strides (tasks taken * stride), process.
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
// so a run queue headed by processes waiting on full limits costs a bounded
// amount; it is also how many candidates beyond its share a turn examines when
// limits may refuse some.
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
		var limits bool
		if err := q.QueryRowContext(ctx, claimLimitsSQL).Scan(&limits); err != nil {
			return fmt.Errorf("claim: limits: %w", mapErr(err))
		}
		skip := []int64{}
		skipJSON := "[]"
		for turn := 0; len(out) < cp.Max && turn < cp.Max+claimRoundsExtra; turn++ {
			var pid, priority, pass int64
			var weight int64
			var maxPar sql.NullInt64
			err := q.QueryRowContext(ctx, claimNextProcessSQL, skipJSON).Scan(&pid, &priority, &pass, &weight, &maxPar)
			if errors.Is(err, sql.ErrNoRows) {
				break
			}
			if err != nil {
				return fmt.Errorf("claim: next process: %w", mapErr(err))
			}
			stride := 1_000_000 / weight

			// This turn's share: the tasks it may take before its pass passes
			// the next process's of the same priority (all that is asked when
			// alone), and no more than its max_parallel leaves room for.
			take := int64(cp.Max - len(out))
			var next int64
			err = q.QueryRowContext(ctx, claimNextPassSQL, priority, pid, skipJSON).Scan(&next)
			switch {
			case err == nil:
				take = min(take, max(1, (next-pass)/stride+1))
			case !errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("claim: next pass: %w", mapErr(err))
			}
			if maxPar.Valid {
				var running int64
				if err := q.QueryRowContext(ctx, claimRunningSQL, pid).Scan(&running); err != nil {
					return fmt.Errorf("claim: running of process %d: %w", pid, mapErr(err))
				}
				take = min(take, maxPar.Int64-running)
			}

			var got []dialect.ClaimedTask
			switch {
			case take > 0 && !limits:
				got, err = s.claimShare(ctx, q, cp, pid, take)
			case take > 0:
				got, err = s.claimAdmitted(ctx, q, cp, pid, take)
			}
			if err != nil {
				return err
			}
			out = append(out, got...)

			if len(got) > 0 {
				_, err = q.ExecContext(ctx, claimAdvanceSQL, int64(len(got))*stride, pid)
			} else {
				skip = append(skip, pid)
				b, _ := json.Marshal(skip)
				skipJSON = string(b)
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
		index := make(map[int64]int, len(out))
		for i, t := range out {
			index[t.ID] = i
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

// claimShare leases up to take available tasks of a process in its own order,
// in one statement: the path when no limit row exists.
func (s *SQLite) claimShare(ctx context.Context, q dialect.Querier, cp dialect.ClaimParams, pid, take int64) ([]dialect.ClaimedTask, error) {
	rows, err := q.QueryContext(ctx, claimShareSQL, cp.WorkerID, cp.Token, offset(cp.Lease), pid, take)
	if err != nil {
		return nil, fmt.Errorf("claim: lease tasks of process %d: %w", pid, mapErr(err))
	}
	defer rows.Close()
	got := make([]dialect.ClaimedTask, 0, take)
	for rows.Next() {
		t := dialect.ClaimedTask{Token: cp.Token}
		if err := rows.Scan(&t.ID, &t.ProcessID, &t.Order, &t.Kind, &t.Body, &t.Attempt, &t.MaxAttempts, &t.Atomic); err != nil {
			return nil, fmt.Errorf("claim: lease tasks of process %d: %w", pid, err)
		}
		got = append(got, t)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("claim: lease tasks of process %d: %w", pid, mapErr(err))
	}
	return got, nil
}

// claimAdmitted leases up to take candidates of a process that the limits
// admit, each checked against the slots the tasks leased before it hold.
func (s *SQLite) claimAdmitted(ctx context.Context, q dialect.Querier, cp dialect.ClaimParams, pid, take int64) ([]dialect.ClaimedTask, error) {
	type candidate struct {
		id       int64
		kind     string
		limitKey sql.NullString
	}
	rows, err := q.QueryContext(ctx, claimCandidatesSQL, pid, take+claimRoundsExtra)
	if err != nil {
		return nil, fmt.Errorf("claim: candidates of process %d: %w", pid, mapErr(err))
	}
	var cands []candidate
	for rows.Next() {
		var c candidate
		if err := rows.Scan(&c.id, &c.kind, &c.limitKey); err != nil {
			rows.Close()
			return nil, fmt.Errorf("claim: %w", err)
		}
		cands = append(cands, c)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("claim: %w", mapErr(err))
	}
	var got []dialect.ClaimedTask
	for _, c := range cands {
		ok, err := limitAdmits(ctx, q, c.limitKey.String, c.kind)
		if err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		if !ok {
			continue
		}
		t := dialect.ClaimedTask{Token: cp.Token}
		if err := q.QueryRowContext(ctx, claimTaskSQL, cp.WorkerID, cp.Token, offset(cp.Lease), c.id).Scan(
			&t.ID, &t.ProcessID, &t.Order, &t.Kind, &t.Body, &t.Attempt, &t.MaxAttempts, &t.Atomic); err != nil {
			return nil, fmt.Errorf("claim: lease task %d: %w", c.id, mapErr(err))
		}
		got = append(got, t)
		if int64(len(got)) >= take {
			break
		}
	}
	return got, nil
}
