package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

const (
	processFindSQL   = `SELECT id, current_order FROM stageq_processes WHERE name = ?`
	processCreateSQL = `INSERT INTO stageq_processes (name) VALUES (?) RETURNING id`
	// In: process, order, kind, body, state, priority, max_attempts, atomic,
	// run_at (NULL: now plus the offset that follows), limit key ("": none).
	// Out: the new id.
	taskInsertSQL = `
INSERT INTO stageq_tasks (process_id, execution_order, kind, body, state, priority, max_attempts, atomic, run_at, limit_key)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, coalesce(?, strftime('%Y-%m-%d %H:%M:%f', 'now', ?)), nullif(?, ''))
RETURNING id`
)

// Submit implements dialect.Dialect. Tasks of the stage that is open after the
// submission start available and the rest blocked; openStage then blocks again
// a started stage above a newly arrived lower order.
func (s *SQLite) Submit(ctx context.Context, q dialect.Querier, sp dialect.SubmitParams) (dialect.SubmitResult, error) {
	var res dialect.SubmitResult
	if len(sp.Tasks) == 0 {
		return res, fmt.Errorf("submit: %w: a submission needs at least one task", dialect.ErrInvalid)
	}
	err := s.inTx(ctx, q, func(q dialect.Querier) error {
		var cur sql.NullInt64
		err := q.QueryRowContext(ctx, processFindSQL, sp.Process).Scan(&res.ProcessID, &cur)
		if errors.Is(err, sql.ErrNoRows) {
			err = q.QueryRowContext(ctx, processCreateSQL, sp.Process).Scan(&res.ProcessID)
		}
		if err != nil {
			return fmt.Errorf("submit: process %q: %w", sp.Process, mapErr(err))
		}
		open := sp.Tasks[0].Order
		for _, t := range sp.Tasks {
			open = min(open, t.Order)
		}
		if cur.Valid {
			open = min(open, int(cur.Int64))
		}
		res.TaskIDs = make([]int64, len(sp.Tasks))
		for i, t := range sp.Tasks {
			state := dialect.StateBlocked
			if t.Order == open {
				state = dialect.StateAvailable
			}
			var runAt sql.NullString
			if t.RunAt != nil {
				runAt = sql.NullString{String: formatTime(*t.RunAt), Valid: true}
			}
			if err := q.QueryRowContext(ctx, taskInsertSQL, res.ProcessID, t.Order, t.Kind, t.Body, state,
				t.Priority, t.MaxAttempts, t.Atomic, runAt, offset(t.Delay), t.LimitKey).Scan(&res.TaskIDs[i]); err != nil {
				return fmt.Errorf("submit: task %d: %w", i+1, mapErr(err))
			}
		}
		return openStage(ctx, q, res.ProcessID)
	})
	if err != nil {
		return dialect.SubmitResult{}, err
	}
	return res, nil
}
