package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// The fence: every statement that ends an attempt matches the lease token and the
// running state, so a worker whose lease was rescued changes nothing. Each
// returns the task's process (and a retry its new run_at), so no row returned
// means the lease is lost.
const (
	finishSucceededSQL = `DELETE FROM stageq_tasks WHERE id = ? AND lease_token = ? AND state = 'running' RETURNING process_id`

	// A task can go back to waiting only while its process is there. One
	// whose process row was deleted by hand (foreign keys off) would wait for
	// ever, so its end is refused as a lost lease, as PostgreSQL's join to
	// the process refuses it, and the rescue removes the task once the lease
	// has expired. A success needs no process: it deletes the task.
	processThereSQL = `EXISTS (SELECT 1 FROM stageq_processes p WHERE p.id = stageq_tasks.process_id)`

	// A task handed back is available only if its stage is still the open one:
	// a lower order may have arrived while it ran.
	backStateSQL = `CASE WHEN execution_order = (SELECT current_order FROM stageq_processes p
                                               WHERE p.id = stageq_tasks.process_id AND p.paused = 0)
                  THEN 'available' ELSE 'blocked' END`

	finishReleasedSQL = `
UPDATE stageq_tasks
   SET state = ` + backStateSQL + `, attempt = attempt - 1, run_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
       worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = ? AND lease_token = ? AND state = 'running' AND ` + processThereSQL + `
RETURNING process_id`

	// The body's connection was lost (dialect.OutcomeAbandoned): back like a
	// released task, counted against the abandon budget. In: error, id, token.
	finishAbandonedSQL = `
UPDATE stageq_tasks
   SET state = CASE WHEN abandons + 1 >= ` + maxAbandonsSQL + ` THEN 'failed' ELSE ` + backStateSQL + ` END,
       abandons = abandons + 1, run_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), last_error = ` + abandonErrorSQL + `,
       worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = ?2 AND lease_token = ?3 AND state = 'running' AND ` + processThereSQL + `
RETURNING process_id, last_error`

	// A retry backs off: its task waits scheduled until its run_at (claim.go).
	// In: retry offset, error, id, token.
	finishRetrySQL = `
UPDATE stageq_tasks
   SET state = CASE WHEN ` + backStateSQL + ` = 'blocked' THEN 'blocked'
                    WHEN strftime('%Y-%m-%d %H:%M:%f', 'now', ?1) > strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 'scheduled'
                    ELSE 'available' END,
       run_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?1), last_error = ?2,
       worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = ?3 AND lease_token = ?4 AND state = 'running' AND ` + processThereSQL + `
RETURNING process_id, run_at`

	finishFailedSQL = `
UPDATE stageq_tasks
   SET state = 'failed', last_error = ?, worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = ? AND lease_token = ? AND state = 'running' AND ` + processThereSQL + `
RETURNING process_id`

	// In: outcome, error, retry time, id, token. INDEXED BY: SQLite plans by
	// sqlite_stat1, which nothing refreshes on its own; after an ANALYZE of a
	// young database (Logs of a row or two) it scanned all of Logs here, on
	// every finish, for good.
	//
	// The key is compared with +? rather than ?. modernc.org/sqlite is built
	// with SQLITE_ENABLE_STAT4, so once an ANALYZE has left samples of
	// stageq_logs_task (sqlite_stat4), a statement comparing a bare bound
	// parameter with that index's columns is compiled again after every new
	// binding of it (SQLite asks the samples whether the value would change
	// the plan): here, at every call. Measured in the bench's depth scenario,
	// whose fill runs ANALYZE: this update took 43-54 µs at the p50 instead of
	// 13. The unary + makes the value an expression the planner does not look
	// up in the samples; the comparison's affinity is the same as a bare ?'s.
	// INDEXED BY still keeps the search on the key. TestLogUpdatesCompileOnce
	// holds both. rescueLogSQL does the same.
	finishLogSQL = `
UPDATE stageq_logs INDEXED BY stageq_logs_task
   SET ended_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
       duration_ms = CAST(round((julianday('now') - julianday(started_at)) * 86400000) AS INTEGER),
       outcome = ?, error = ?, retry_at = ?
 WHERE task_id = +? AND lease_token = +?`
)

// A batch's successes end together, in two statements for them all instead
// of two a task (finishOne): on a draining worker the per-statement work of
// the engine and of database/sql was a third of SQLite's one writer. In: the
// attempts as leasePairs encodes them (pairs.go). The attempt test is the
// fence; the id test beside it lets the planner search Tasks by its key for
// each id (the plan test TestBatchSuccessSeeksTasksByKey).
const (
	finishSucceededManySQL = `
DELETE FROM stageq_tasks
 WHERE id IN (SELECT value FROM json_each(?1))
   AND id || ':' || lease_token IN (SELECT value FROM json_each(?2))
   AND state = 'running'
RETURNING id, lease_token, process_id`

	// In: the attempts the statement above deleted. INDEXED BY: as finishLogSQL.
	finishLogSucceededManySQL = `
UPDATE stageq_logs INDEXED BY stageq_logs_task
   SET ended_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
       duration_ms = CAST(round((julianday('now') - julianday(started_at)) * 86400000) AS INTEGER),
       outcome = 'succeeded', error = NULL, retry_at = NULL
 WHERE task_id IN (SELECT value FROM json_each(?1))
   AND task_id || ':' || lease_token IN (SELECT value FROM json_each(?2))`
)

// TaskFinish implements dialect.Dialect.
func (s *SQLite) TaskFinish(ctx context.Context, tx *sql.Tx, fp dialect.FinishParams) error {
	err := s.inTx(ctx, tx, func(q dialect.Querier) error {
		processID, err := finishOne(ctx, q, fp)
		if err != nil {
			return err
		}
		return openStageAfter(ctx, q, processID, fp.Outcome == dialect.OutcomeSucceeded)
	})
	if err != nil {
		return fmt.Errorf("finish task %d: %w", fp.TaskID, err)
	}
	return nil
}

// TaskFinishMany implements dialect.BatchFinisher: one write transaction for the
// whole batch (one turn of SQLite's write lock instead of one per task), and one
// openStageAfter per process touched. SQLite has one writer at a time, so the stage
// advances inside the same transaction and nothing is left to StagesAdvance.
func (s *SQLite) TaskFinishMany(ctx context.Context, ps []dialect.FinishParams) (dialect.FinishResult, error) {
	held := make([]bool, len(ps))
	err := s.inTx(ctx, nil, func(q dialect.Querier) error {
		var processes []int64
		onlySucceeded := map[int64]bool{} // per process touched: did every end succeed?
		ended := func(processID int64, succeeded bool) {
			ok, seen := onlySucceeded[processID]
			if !seen {
				processes = append(processes, processID)
				ok = true
			}
			onlySucceeded[processID] = ok && succeeded
		}
		// A batch that names a task twice goes entry by entry, in its order:
		// ending its successes first would change what the later entries of
		// that task find.
		together := !dialect.NamesATaskTwice(ps)
		if together {
			if err := finishSucceededMany(ctx, q, ps, held, ended); err != nil {
				return err
			}
		}
		for i, fp := range ps {
			if together && isPlainSuccess(fp) {
				continue // ended above
			}
			processID, err := finishOne(ctx, q, fp)
			if errors.Is(err, dialect.ErrLeaseLost) {
				continue
			}
			if err != nil {
				return fmt.Errorf("task %d: %w", fp.TaskID, err)
			}
			held[i] = true
			ended(processID, fp.Outcome == dialect.OutcomeSucceeded)
		}
		for _, p := range processes {
			if err := openStageAfter(ctx, q, p, onlySucceeded[p]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return dialect.FinishResult{}, fmt.Errorf("finish %d tasks: %w", len(ps), err)
	}
	return dialect.FinishResult{Held: held}, nil
}

// isPlainSuccess says whether finishSucceededMany ends fp: a success with no
// error text to record (finishOne ends the rest).
func isPlainSuccess(fp dialect.FinishParams) bool {
	return fp.Outcome == dialect.OutcomeSucceeded && fp.Error == ""
}

// finishSucceededMany ends the plain successes of ps (isPlainSuccess), which
// names each task once, inside the caller's write transaction: it sets held[i]
// for each whose token still held its task, and calls ended with that task's
// process.
func finishSucceededMany(ctx context.Context, q dialect.Querier, ps []dialect.FinishParams, held []bool, ended func(processID int64, succeeded bool)) error {
	at := map[dialect.TaskLease]int{}
	var plain []dialect.TaskLease
	for i, fp := range ps {
		if !isPlainSuccess(fp) {
			continue
		}
		a := dialect.TaskLease{ID: fp.TaskID, Token: fp.Token}
		at[a] = i
		plain = append(plain, a)
	}
	if len(plain) == 0 {
		return nil
	}
	type deleted struct {
		dialect.TaskLease
		processID int64
	}
	ids, attempts := leasePairs(plain)
	gone, err := dialect.QueryAll(ctx, q, mapErr, finishSucceededManySQL, func(r *sql.Rows, d *deleted) error {
		return r.Scan(&d.ID, &d.Token, &d.processID)
	}, ids, attempts)
	if err != nil {
		return fmt.Errorf("end %d tasks: %w", len(plain), err)
	}
	if len(gone) == 0 {
		return nil
	}
	done := make([]dialect.TaskLease, len(gone))
	for k, d := range gone {
		held[at[d.TaskLease]] = true
		ended(d.processID, true)
		done[k] = d.TaskLease
	}
	ids, attempts = leasePairs(done)
	if _, err := q.ExecContext(ctx, finishLogSucceededManySQL, ids, attempts); err != nil {
		return fmt.Errorf("log the end of %d tasks: %w", len(gone), mapErr(err))
	}
	return nil
}

// finishOne ends one attempt inside the caller's write transaction and returns
// its process, whose stage the caller re-derives; ErrLeaseLost when the token no
// longer holds the task.
func finishOne(ctx context.Context, q dialect.Querier, fp dialect.FinishParams) (int64, error) {
	var errText, retryAt sql.NullString
	if fp.Error != "" {
		errText = sql.NullString{String: fp.Error, Valid: true}
	}
	var processID int64
	var err error
	switch {
	case fp.Outcome == dialect.OutcomeSucceeded:
		err = q.QueryRowContext(ctx, finishSucceededSQL, fp.TaskID, fp.Token).Scan(&processID)
	case fp.Outcome == dialect.OutcomeReleased:
		err = q.QueryRowContext(ctx, finishReleasedSQL, fp.TaskID, fp.Token).Scan(&processID)
	case fp.Outcome == dialect.OutcomeAbandoned:
		err = q.QueryRowContext(ctx, finishAbandonedSQL, errText, fp.TaskID, fp.Token).Scan(&processID, &errText)
	case fp.Outcome == dialect.OutcomeFailed && fp.RetryAfter > 0:
		err = q.QueryRowContext(ctx, finishRetrySQL, offset(fp.RetryAfter), errText, fp.TaskID, fp.Token).Scan(&processID, &retryAt)
	case fp.Outcome == dialect.OutcomeFailed:
		err = q.QueryRowContext(ctx, finishFailedSQL, errText, fp.TaskID, fp.Token).Scan(&processID)
	default:
		return 0, fmt.Errorf("%w: unknown outcome %q", dialect.ErrInvalid, fp.Outcome)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return 0, dialect.ErrLeaseLost
	}
	if err != nil {
		return 0, mapErr(err)
	}
	if _, err := q.ExecContext(ctx, finishLogSQL, string(fp.Outcome), errText, retryAt, fp.TaskID, fp.Token); err != nil {
		return 0, fmt.Errorf("log end: %w", mapErr(err))
	}
	return processID, nil
}
