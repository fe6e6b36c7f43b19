package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// finishSQL calls stageq.finish (migrations/postgres), which checks the fence,
// locks the process row, ends the attempt in Tasks and Logs and opens the next
// stage when this was the last task of the current one. In: task id, token,
// outcome, error text, retry delay in ms (NULL: failed for good). Out: whether
// the token still held the task.
const finishSQL = `SELECT stageq.finish($1, $2, $3, $4, $5)`

// TaskFinish implements dialect.Dialect.
func (p *Postgres) TaskFinish(ctx context.Context, q dialect.Querier, fp dialect.FinishParams) error {
	var retry sql.NullInt64
	if fp.Outcome == dialect.OutcomeFailed && fp.RetryAfter > 0 {
		retry = sql.NullInt64{Int64: max(fp.RetryAfter.Milliseconds(), 1), Valid: true}
	}
	var errText sql.NullString
	if fp.Error != "" {
		errText = sql.NullString{String: fp.Error, Valid: true}
	}
	var held bool
	if err := q.QueryRowContext(ctx, finishSQL, fp.TaskID, fp.Token, string(fp.Outcome), errText, retry).Scan(&held); err != nil {
		return fmt.Errorf("finish task %d: %w", fp.TaskID, mapErr(err))
	}
	if !held {
		return fmt.Errorf("finish task %d: %w", fp.TaskID, dialect.ErrLeaseLost)
	}
	return nil
}

// finishManySQL calls stageq.finish_many (migrations/postgres), the batch form of
// stageq.finish: parallel arrays of task ids, tokens, outcomes, errors (” for
// none) and retry delays in ms (0: failed for good). Out: the ids still held.
const finishManySQL = `SELECT id FROM stageq.finish_many($1, $2, $3, $4, $5) AS f(id)`

// TaskFinishMany implements dialect.BatchFinisher.
func (p *Postgres) TaskFinishMany(ctx context.Context, ps []dialect.FinishParams) ([]bool, error) {
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
	rows, err := p.db.QueryContext(ctx, finishManySQL, ids, tokens, outcomes, errs, retries)
	if err != nil {
		return nil, fmt.Errorf("finish %d tasks: %w", len(ps), mapErr(err))
	}
	defer rows.Close()
	held := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("finish %d tasks: %w", len(ps), err)
		}
		held[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("finish %d tasks: %w", len(ps), mapErr(err))
	}
	out := make([]bool, len(ps))
	for i, fp := range ps {
		out[i] = held[fp.TaskID]
	}
	return out, nil
}
