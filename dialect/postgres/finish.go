package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// finishSQL calls finish (routines/postgres/50_finish.sql),
// which checks the fence and ends the attempt in Tasks and Logs without locking
// the process row. In: task id, token, outcome, error text, retry delay in ms
// (NULL: failed for good). Out: whether the token still held the task. The
// caller advances the process's stage once its transaction committed.
const finishSQL = `SELECT stageq_routines.finish($1, $2, $3, $4, $5)`

// TaskFinish implements dialect.Dialect.
func (p *Postgres) TaskFinish(ctx context.Context, tx *sql.Tx, fp dialect.FinishParams) error {
	q := dialect.On(p.db, tx)
	var retry sql.NullInt64
	if fp.Outcome == dialect.OutcomeFailed && fp.RetryAfter > 0 {
		retry = sql.NullInt64{Int64: max(fp.RetryAfter.Milliseconds(), 1), Valid: true}
	}
	var errText sql.NullString
	if fp.Error != "" {
		errText = sql.NullString{String: fp.Error, Valid: true}
	}
	var held bool
	if err := q.QueryRowContext(ctx, p.calls.SQL(finishSQL), fp.TaskID, fp.Token, string(fp.Outcome), errText, retry).Scan(&held); err != nil {
		return fmt.Errorf("finish task %d: %w", fp.TaskID, mapErr(err))
	}
	if !held {
		return fmt.Errorf("finish task %d: %w", fp.TaskID, dialect.ErrLeaseLost)
	}
	return nil
}

// finishManySQL calls finish_many (routines/postgres/50_finish.sql), the batch
// form of finish:
// parallel arrays of task ids, tokens, outcomes, errors (empty for none) and retry
// delays in ms (0: failed for good). Out: a row (id, NULL) per attempt whose
// token still held, and a row (NULL, process id) per process whose stage the
// batch may have ended.
const finishManySQL = `SELECT task_id, advance_process_id FROM stageq_routines.finish_many($1, $2, $3, $4, $5)`

// TaskFinishMany implements dialect.BatchFinisher. finish_many answers by task
// id, so a batch that names a task twice goes in rounds (dialect.FinishInRounds),
// each a transaction of its own: in one, a round would hold the process rows
// the last one locked while it locks others, out of the order a concurrent
// finish_many takes them in (a deadlock, seen).
func (p *Postgres) TaskFinishMany(ctx context.Context, ps []dialect.FinishParams) (dialect.FinishResult, error) {
	return dialect.FinishInRounds(ps, func(part []dialect.FinishParams) (dialect.FinishResult, error) {
		return p.finishMany(ctx, part)
	})
}

// finishMany runs finish_many once for ps, which names each task once.
func (p *Postgres) finishMany(ctx context.Context, ps []dialect.FinishParams) (dialect.FinishResult, error) {
	var res dialect.FinishResult
	ids := make([]int64, len(ps))
	tokens := make([]int64, len(ps))
	outcomes := make([]string, len(ps))
	errs := make([]string, len(ps))
	retries := make([]int64, len(ps))
	for i, fp := range ps {
		ids[i], tokens[i], outcomes[i], errs[i] = fp.TaskID, fp.Token, string(fp.Outcome), fp.Error
		if fp.Outcome == dialect.OutcomeFailed && fp.RetryAfter > 0 {
			retries[i] = max(fp.RetryAfter.Milliseconds(), 1)
		}
	}
	rows, err := p.db.QueryContext(ctx, p.calls.SQL(finishManySQL), ids, tokens, outcomes, errs, retries)
	if err != nil {
		return res, fmt.Errorf("finish %d tasks: %w", len(ps), mapErr(err))
	}
	defer rows.Close()
	held := map[int64]bool{}
	for rows.Next() {
		var id, pid sql.NullInt64
		if err := rows.Scan(&id, &pid); err != nil {
			// One statement: on any error nothing is known to have committed, so
			// no process read so far is reported.
			return dialect.FinishResult{}, fmt.Errorf("finish %d tasks: %w", len(ps), err)
		}
		if id.Valid {
			held[id.Int64] = true
		}
		if pid.Valid {
			res.Advance = append(res.Advance, pid.Int64)
		}
	}
	if err := rows.Err(); err != nil {
		return dialect.FinishResult{}, fmt.Errorf("finish %d tasks: %w", len(ps), mapErr(err))
	}
	res.Held = make([]bool, len(ps))
	for i, fp := range ps {
		res.Held[i] = held[fp.TaskID]
	}
	return res, nil
}

// advanceSQL calls advance (routines/postgres/30_stages.sql): in, process ids whose stage may have ended;
// out, those whose row another transaction holds (not advanced yet).
const advanceSQL = `SELECT id FROM stageq_routines.advance($1) AS a(id)`

// StagesAdvance implements dialect.StageAdvancer.
func (p *Postgres) StagesAdvance(ctx context.Context, processIDs []int64) ([]int64, error) {
	if len(processIDs) == 0 {
		return nil, nil
	}
	rows, err := p.db.QueryContext(ctx, p.calls.SQL(advanceSQL), processIDs)
	if err != nil {
		return processIDs, fmt.Errorf("advance stages of %d processes: %w", len(processIDs), mapErr(err))
	}
	defer rows.Close()
	var busy []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return processIDs, fmt.Errorf("advance stages: %w", err)
		}
		busy = append(busy, id)
	}
	if err := rows.Err(); err != nil {
		return processIDs, fmt.Errorf("advance stages: %w", mapErr(err))
	}
	return busy, nil
}
