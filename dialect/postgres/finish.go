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
