package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// The fence: every statement that ends an attempt matches the lease token and the
// running state, so a worker whose lease was rescued changes nothing.
const (
	finishHeldSQL = `SELECT process_id FROM stageq_tasks WHERE id = ? AND lease_token = ? AND state = 'running'`

	finishSucceededSQL = `DELETE FROM stageq_tasks WHERE id = ? AND lease_token = ? AND state = 'running'`

	// A task handed back is available only if its stage is still the open one:
	// a lower order may have arrived while it ran.
	backStateSQL = `CASE WHEN execution_order = (SELECT current_order FROM stageq_processes p
                                               WHERE p.id = stageq_tasks.process_id)
                  THEN 'available' ELSE 'blocked' END`

	finishReleasedSQL = `
UPDATE stageq_tasks
   SET state = ` + backStateSQL + `, attempt = attempt - 1, run_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
       worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = ? AND lease_token = ? AND state = 'running'`

	// In: retry time, error, id, token.
	finishRetrySQL = `
UPDATE stageq_tasks
   SET state = ` + backStateSQL + `, run_at = ?, last_error = ?,
       worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = ? AND lease_token = ? AND state = 'running'`

	finishFailedSQL = `
UPDATE stageq_tasks
   SET state = 'failed', last_error = ?, worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = ? AND lease_token = ? AND state = 'running'`

	// In: outcome, error, retry time, id, token.
	finishLogSQL = `
UPDATE stageq_logs
   SET ended_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
       duration_ms = CAST(round((julianday('now') - julianday(started_at)) * 86400000) AS INTEGER),
       outcome = ?, error = ?, retry_at = ?
 WHERE task_id = ? AND lease_token = ?`

	retryAtSQL = `SELECT strftime('%Y-%m-%d %H:%M:%f', 'now', ?)`
)

// TaskFinish implements dialect.Dialect.
func (s *SQLite) TaskFinish(ctx context.Context, q dialect.Querier, fp dialect.FinishParams) error {
	err := s.inTx(ctx, q, func(q dialect.Querier) error {
		var processID int64
		err := q.QueryRowContext(ctx, finishHeldSQL, fp.TaskID, fp.Token).Scan(&processID)
		if errors.Is(err, sql.ErrNoRows) {
			return dialect.ErrLeaseLost
		}
		if err != nil {
			return mapErr(err)
		}
		var errText, retryAt sql.NullString
		if fp.Error != "" {
			errText = sql.NullString{String: fp.Error, Valid: true}
		}
		switch {
		case fp.Outcome == dialect.OutcomeSucceeded:
			_, err = q.ExecContext(ctx, finishSucceededSQL, fp.TaskID, fp.Token)
		case fp.Outcome == dialect.OutcomeReleased:
			_, err = q.ExecContext(ctx, finishReleasedSQL, fp.TaskID, fp.Token)
		case fp.Outcome == dialect.OutcomeFailed && fp.RetryAfter > 0:
			if err = q.QueryRowContext(ctx, retryAtSQL, offset(fp.RetryAfter)).Scan(&retryAt); err == nil {
				_, err = q.ExecContext(ctx, finishRetrySQL, retryAt, errText, fp.TaskID, fp.Token)
			}
		case fp.Outcome == dialect.OutcomeFailed:
			_, err = q.ExecContext(ctx, finishFailedSQL, errText, fp.TaskID, fp.Token)
		default:
			return fmt.Errorf("%w: unknown outcome %q", dialect.ErrInvalid, fp.Outcome)
		}
		if err != nil {
			return mapErr(err)
		}
		if _, err := q.ExecContext(ctx, finishLogSQL, string(fp.Outcome), errText, retryAt, fp.TaskID, fp.Token); err != nil {
			return fmt.Errorf("log end: %w", mapErr(err))
		}
		return openStage(ctx, q, processID)
	})
	if err != nil {
		return fmt.Errorf("finish task %d: %w", fp.TaskID, err)
	}
	return nil
}
