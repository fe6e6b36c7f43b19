package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/stageq/stageq/dialect"
)

// The claim runs under BEGIN IMMEDIATE, so no other writer runs between its reads
// and writes and it needs no row locks. It makes PostgreSQL's decisions
// (stageq.claim): the available tasks of the highest process priority with the
// lowest virtual times (fair.go) go first, one statement for all of them when
// no limit exists; with limits, each candidate is admitted against the slots in
// use, and one that is not loses its turn. A task of a kind the worker cannot
// run (ClaimParams.Kinds) is passed over. A task whose run_at lies ahead waits
// as scheduled, outside stageq_tasks_claim, and the claim first makes the due
// ones available (claimDueSQL), so the walk meets only tasks it may take
// (migrations/sqlite/000015_scheduled_state.up.sql).
//
// LIMIT CAST(? AS INTEGER), not LIMIT ?: SQLite plans a bare bound LIMIT with
// its value and re-prepares the statement every time another value is bound,
// which a cached statement is here to avoid. INDEXED BY: the claim must walk
// stageq_tasks_claim in its order, never sort.
const (
	// dueWindowSQL: the (at most) 1,000 due scheduled tasks a claim handles,
	// oldest run_at first: a seek on stageq_tasks_due, which holds only
	// scheduled tasks.
	dueWindowSQL = `
SELECT id, process_id, process_priority FROM stageq_tasks INDEXED BY stageq_tasks_due
 WHERE state = 'scheduled' AND run_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
 ORDER BY run_at
 LIMIT 1000`
	// Is any scheduled task due? The one statement of the due step while none
	// is, as PostgreSQL's claim asks first.
	claimAnyDueSQL = `
SELECT EXISTS (SELECT 1 FROM stageq_tasks INDEXED BY stageq_tasks_due
                WHERE state = 'scheduled' AND run_at <= strftime('%Y-%m-%d %H:%M:%f', 'now'))`
	// A due task whose process row was deleted by hand (foreign keys off, as
	// in the sqlite3 shell) can never run: it goes, as PostgreSQL's claim
	// removes it, before claimDueSQL. Left scheduled, it would come first in
	// every due step for good; made available, a claim under limits would
	// never take it, and it would hold its priority's head. What it returns
	// goes to Logs (claimDueGoneLogSQL).
	claimDueGoneSQL = `
DELETE FROM stageq_tasks
 WHERE id IN (SELECT d.id FROM (` + dueWindowSQL + `) d
               WHERE NOT EXISTS (SELECT 1 FROM stageq_processes p WHERE p.id = d.process_id))
RETURNING id, process_id, execution_order, kind, body, attempt, schedule_name, scheduled_for`
	// A removed task's Logs row, since its last one (a failure) promised a
	// retry: cancelled by the claiming worker (?2), under the process's newest
	// name in Logs (stageq_logs_process). In: the task's columns as
	// claimDueGoneSQL returns them, the worker's id.
	claimDueGoneLogSQL = `
INSERT INTO stageq_logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt, lease_token,
                         started_at, ended_at, duration_ms, outcome, error, schedule_name, scheduled_for)
SELECT ?1, t.process_id, ` + loggedNameSQL + `,
       ?4, ?5, ?6, ?2, ?7, 0, strftime('%Y-%m-%d %H:%M:%f', 'now'), strftime('%Y-%m-%d %H:%M:%f', 'now'), 0,
       'cancelled', 'its process (id ' || t.process_id || ') no longer exists: task removed', ?8, ?9
  FROM (SELECT ?3 AS process_id) t`
	// Due scheduled tasks become available. As PostgreSQL's claim does, each
	// is stamped with its priority's current virtual time, its process's due
	// tasks spaced by its stride (fairStride): it takes its turn at the head,
	// not the turn of its first attempt. MATERIALIZED: the UPDATE turns the
	// rows that due selects, so due must be read once.
	claimDueSQL = `
WITH due AS MATERIALIZED (
    SELECT d.id, d.process_priority AS priority,
           (row_number() OVER (PARTITION BY d.process_id ORDER BY d.id) - 1) * (1000000 / max(p.weight, 1)) AS step
      FROM (` + dueWindowSQL + `) d JOIN stageq_processes p ON p.id = d.process_id
), head AS MATERIALIZED (
    SELECT hp.priority, ` + headVTimeSQL + ` AS vnow
      FROM (SELECT DISTINCT priority FROM due) hp
)
UPDATE stageq_tasks
   SET state = 'available',
       vtime = (SELECT h.vnow + d.step FROM due d JOIN head h ON h.priority = d.priority WHERE d.id = stageq_tasks.id)
 WHERE id IN (SELECT id FROM due)`
	// Are limits defined (a limit row or a capped process)? Without any, every
	// task is admitted and a priority level is leased by one UPDATE.
	claimGatedSQL = `SELECT EXISTS (SELECT 1 FROM stageq_limits)
    OR EXISTS (SELECT 1 FROM stageq_processes WHERE max_parallel IS NOT NULL)`
	// The highest priority with a task that may start now, below ?1 (NULL: any),
	// of the kinds ?2 (a JSON array; NULL: any).
	claimTopSQL = `
SELECT process_priority FROM stageq_tasks INDEXED BY stageq_tasks_claim
 WHERE state = 'available' AND (?1 IS NULL OR process_priority < ?1)
   AND (?2 IS NULL OR kind IN (SELECT value FROM json_each(?2)))
 ORDER BY process_priority DESC, vtime, id
 LIMIT 1`
	// Without limits every task is admitted, so one UPDATE takes the head of
	// the claim index across all priority levels. In: worker, token, lease
	// offset, how many, kinds (a JSON array; NULL: any).
	claimHeadSQL = `
UPDATE stageq_tasks
   SET state = 'running', attempt = attempt + 1, worker_id = ?1, lease_token = ?2,
       lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?3)
 WHERE id IN (SELECT id FROM stageq_tasks INDEXED BY stageq_tasks_claim
               WHERE state = 'available'
                 AND (?5 IS NULL OR kind IN (SELECT value FROM json_each(?5)))
               ORDER BY process_priority DESC, vtime, id
               LIMIT CAST(?4 AS INTEGER))
RETURNING id, process_id, execution_order, kind, body, attempt, max_attempts, atomic, abandons`
	// In: priority, how many, processes found full (JSON array), limit keys
	// found full, kinds found full, kinds the worker runs (NULL: any). Out:
	// candidates in claim order.
	claimCandidatesSQL = `
SELECT t.id, t.process_id, t.kind, t.limit_key, p.max_parallel, p.weight
  FROM stageq_tasks t INDEXED BY stageq_tasks_claim JOIN stageq_processes p ON p.id = t.process_id
 WHERE t.state = 'available' AND t.process_priority = ?1
   AND t.process_id NOT IN (SELECT value FROM json_each(?3))
   AND coalesce(t.limit_key, '') NOT IN (SELECT value FROM json_each(?4))
   AND t.kind NOT IN (SELECT value FROM json_each(?5))
   AND (?6 IS NULL OR t.kind IN (SELECT value FROM json_each(?6)))
 ORDER BY t.process_priority DESC, t.vtime, t.id
 LIMIT CAST(?2 AS INTEGER)`
	// In: process.
	claimRunningSQL = `SELECT count(*) FROM stageq_tasks WHERE process_id = ? AND state = 'running'`
	// In: worker, token, lease offset, task id.
	claimTaskSQL = `
UPDATE stageq_tasks
   SET state = 'running', attempt = attempt + 1, worker_id = ?, lease_token = ?,
       lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?)
 WHERE id = ?
RETURNING id, process_id, execution_order, kind, body, attempt, max_attempts, atomic, abandons`
	// A candidate its limits do not admit loses its turn: it goes behind the
	// current virtual time. In: the new virtual time, task id.
	claimPassOverSQL = `UPDATE stageq_tasks SET vtime = max(vtime, ?) WHERE id = ?`
)

// claimExtra is how many candidates beyond what it asks a claim with limits
// examines per round, so full limits cost it a bounded number of rows.
const claimExtra = 16

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
		if err := makeDueAvailable(ctx, q, cp.WorkerID); err != nil {
			return err
		}
		var gated bool
		if err := q.QueryRowContext(ctx, claimGatedSQL).Scan(&gated); err != nil {
			return fmt.Errorf("claim: limits: %w", mapErr(err))
		}
		if !gated {
			got, err := s.claimHead(ctx, q, cp)
			if err != nil || len(got) == 0 {
				return err
			}
			out, err = claimLog(ctx, q, cp, got)
			return err
		}
		var below sql.NullInt64 // the priority levels served so far are above this
		for len(out) < cp.Max {
			var top int64
			err := q.QueryRowContext(ctx, claimTopSQL, below, dialect.KindsJSON(cp.Kinds)).Scan(&top)
			if errors.Is(err, sql.ErrNoRows) {
				break
			}
			if err != nil {
				return fmt.Errorf("claim: next priority: %w", mapErr(err))
			}
			got, err := s.claimAdmitted(ctx, q, cp, top, cp.Max-len(out))
			if err != nil {
				return err
			}
			out = append(out, got...)
			below = sql.NullInt64{Int64: top, Valid: true}
		}
		if len(out) == 0 {
			return nil
		}
		var err error
		out, err = claimLog(ctx, q, cp, out)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// makeDueAvailable is the claim's due step: the scheduled tasks whose run_at
// has come become available (those of a deleted process go, logged as the
// claiming worker's doing).
func makeDueAvailable(ctx context.Context, q dialect.Querier, worker string) error {
	var due bool
	if err := q.QueryRowContext(ctx, claimAnyDueSQL).Scan(&due); err != nil {
		return fmt.Errorf("claim: due tasks: %w", mapErr(err))
	}
	if !due {
		return nil
	}
	if err := removeDueOrphans(ctx, q, worker); err != nil {
		return err
	}
	if _, err := q.ExecContext(ctx, claimDueSQL); err != nil {
		return fmt.Errorf("claim: due tasks: %w", mapErr(err))
	}
	return nil
}

// removeDueOrphans deletes the due tasks whose process row is gone
// (claimDueGoneSQL) and writes each one's Logs row. Such tasks are rare: the
// delete returns none in nearly every due step, and then it is the only
// statement.
func removeDueOrphans(ctx context.Context, q dialect.Querier, worker string) error {
	type gone struct {
		id, process, order, attempt int64
		kind, body                  string
		schedule, scheduledFor      sql.NullString
	}
	rows, err := q.QueryContext(ctx, claimDueGoneSQL)
	if err != nil {
		return fmt.Errorf("claim: due tasks of deleted processes: %w", mapErr(err))
	}
	var removed []gone
	for rows.Next() {
		var g gone
		if err := rows.Scan(&g.id, &g.process, &g.order, &g.kind, &g.body, &g.attempt, &g.schedule, &g.scheduledFor); err != nil {
			rows.Close()
			return fmt.Errorf("claim: due tasks of deleted processes: %w", err)
		}
		removed = append(removed, g)
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return fmt.Errorf("claim: due tasks of deleted processes: %w", mapErr(err))
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("claim: due tasks of deleted processes: %w", mapErr(err))
	}
	for _, g := range removed {
		if _, err := q.ExecContext(ctx, claimDueGoneLogSQL, g.id, worker, g.process, g.order, g.kind, g.body,
			g.attempt, g.schedule, g.scheduledFor); err != nil {
			return fmt.Errorf("claim: log the removal of task %d: %w", g.id, mapErr(err))
		}
	}
	return nil
}

// claimLog opens the Logs rows of the leased tasks, names their processes,
// and returns the tasks it named. A task whose process row is gone (deleted
// by hand with foreign keys off) is left out, leased and unlogged, as
// PostgreSQL's claim leaves it out: it must not run for a process that no
// longer exists, and the rescue removes it once its lease expires.
func claimLog(ctx context.Context, q dialect.Querier, cp dialect.ClaimParams, out []dialect.ClaimedTask) ([]dialect.ClaimedTask, error) {
	index := make(map[int64]int, len(out))
	for i, t := range out {
		index[t.ID] = i
	}
	rows, err := q.QueryContext(ctx, claimLogSQL, cp.Token, cp.WorkerID)
	if err != nil {
		return nil, fmt.Errorf("claim: log start: %w", mapErr(err))
	}
	defer rows.Close()
	named := make([]bool, len(out))
	for rows.Next() {
		var id int64
		var name string
		if err := rows.Scan(&id, &name); err != nil {
			return nil, fmt.Errorf("claim: log start: %w", err)
		}
		if i, ok := index[id]; ok {
			out[i].Process, named[i] = name, true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim: log start: %w", err)
	}
	kept := out[:0]
	for i, t := range out {
		if named[i] {
			kept = append(kept, t)
		}
	}
	return kept, nil
}

// claimHead leases up to cp.Max available tasks in claim order (priority, then
// virtual time) in one statement: the path when no limit exists.
func (s *SQLite) claimHead(ctx context.Context, q dialect.Querier, cp dialect.ClaimParams) ([]dialect.ClaimedTask, error) {
	take := cp.Max
	rows, err := q.QueryContext(ctx, claimHeadSQL, cp.WorkerID, cp.Token, offset(cp.Lease), take, dialect.KindsJSON(cp.Kinds))
	if err != nil {
		return nil, fmt.Errorf("claim: lease tasks: %w", mapErr(err))
	}
	defer rows.Close()
	got := make([]dialect.ClaimedTask, 0, take)
	for rows.Next() {
		t := dialect.ClaimedTask{Token: cp.Token}
		if err := rows.Scan(&t.ID, &t.ProcessID, &t.Order, &t.Kind, &t.Body, &t.Attempt, &t.MaxAttempts, &t.Atomic, &t.Abandons); err != nil {
			return nil, fmt.Errorf("claim: lease tasks: %w", err)
		}
		got = append(got, t)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("claim: lease tasks: %w", mapErr(err))
	}
	return got, nil
}

// claimAdmitted leases up to take tasks of one priority that the limits admit,
// each checked against the slots the tasks leased before it hold. A process,
// limit key or kind found full is left out of the rest of this claim; the
// level is done when a round finds fewer candidates than it asked for.
func (s *SQLite) claimAdmitted(ctx context.Context, q dialect.Querier, cp dialect.ClaimParams, priority int64, take int) ([]dialect.ClaimedTask, error) {
	type candidate struct {
		id, process int64
		kind        string
		limitKey    sql.NullString
		maxPar      sql.NullInt64
		weight      int64
	}
	fullP, fullK, fullKind := []int64{}, []string{}, []string{}
	var got []dialect.ClaimedTask
	for len(got) < take {
		jp, _ := json.Marshal(fullP)
		jk, _ := json.Marshal(fullK)
		jkind, _ := json.Marshal(fullKind)
		want := take - len(got) + claimExtra
		rows, err := q.QueryContext(ctx, claimCandidatesSQL, priority, want, string(jp), string(jk), string(jkind),
			dialect.KindsJSON(cp.Kinds))
		if err != nil {
			return nil, fmt.Errorf("claim: candidates: %w", mapErr(err))
		}
		var cands []candidate
		for rows.Next() {
			var c candidate
			if err := rows.Scan(&c.id, &c.process, &c.kind, &c.limitKey, &c.maxPar, &c.weight); err != nil {
				rows.Close()
				return nil, fmt.Errorf("claim: %w", err)
			}
			cands = append(cands, c)
		}
		if err := rows.Close(); err != nil {
			return nil, fmt.Errorf("claim: %w", mapErr(err))
		}
		full := func(c candidate) bool {
			return slices.Contains(fullP, c.process) || slices.Contains(fullK, c.limitKey.String) || slices.Contains(fullKind, c.kind)
		}
		for _, c := range cands {
			if full(c) {
				continue
			}
			ok := true
			if c.maxPar.Valid {
				var running int64
				if err := q.QueryRowContext(ctx, claimRunningSQL, c.process).Scan(&running); err != nil {
					return nil, fmt.Errorf("claim: running of process %d: %w", c.process, mapErr(err))
				}
				if ok = running < c.maxPar.Int64; !ok {
					fullP = append(fullP, c.process)
				}
			}
			if ok {
				admitted, err := limitAdmits(ctx, q, c.limitKey.String, c.kind)
				if err != nil {
					return nil, fmt.Errorf("claim: %w", err)
				}
				if !admitted {
					ok = false
					keyOK := true
					if c.limitKey.Valid {
						if keyOK, err = limitAdmits(ctx, q, c.limitKey.String, ""); err != nil {
							return nil, fmt.Errorf("claim: %w", err)
						}
					}
					if keyOK {
						fullKind = append(fullKind, c.kind)
					} else {
						fullK = append(fullK, c.limitKey.String)
					}
				}
			}
			if !ok {
				v, err := vnow(ctx, q, priority)
				if err != nil {
					return nil, fmt.Errorf("claim: %w", err)
				}
				if _, err := q.ExecContext(ctx, claimPassOverSQL, v+fairStride(c.weight), c.id); err != nil {
					return nil, fmt.Errorf("claim: pass over task %d: %w", c.id, mapErr(err))
				}
				continue
			}
			t := dialect.ClaimedTask{Token: cp.Token}
			if err := q.QueryRowContext(ctx, claimTaskSQL, cp.WorkerID, cp.Token, offset(cp.Lease), c.id).Scan(
				&t.ID, &t.ProcessID, &t.Order, &t.Kind, &t.Body, &t.Attempt, &t.MaxAttempts, &t.Atomic, &t.Abandons); err != nil {
				return nil, fmt.Errorf("claim: lease task %d: %w", c.id, mapErr(err))
			}
			got = append(got, t)
			if len(got) >= take {
				break
			}
		}
		if len(cands) < want {
			break // the whole level was seen
		}
	}
	return got, nil
}
