package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/stageq/stageq/dialect"
)

const (
	processFindSQL   = `SELECT id, current_order, paused, weight, priority FROM stageq_processes WHERE name = ?`
	processCreateSQL = `INSERT INTO stageq_processes (name) VALUES (?) RETURNING id, current_order, paused, weight, priority`
	// In: process, order, kind, body, state, priority, max_attempts, atomic,
	// run_at (NULL: now plus the offset that follows), limit key ("": none),
	// virtual time, process priority. Out: the new id. A task of the open
	// stage whose run_at lies ahead waits as scheduled (claim.go).
	taskInsertSQL = `
INSERT INTO stageq_tasks (process_id, execution_order, kind, body, state, priority, max_attempts, atomic, run_at, limit_key,
                          vtime, process_priority)
SELECT ?1, ?2, ?3, ?4,
       CASE WHEN ?5 = 'available' AND r.at > strftime('%Y-%m-%d %H:%M:%f', 'now') THEN 'scheduled' ELSE ?5 END,
       ?6, ?7, ?8, r.at, nullif(?11, ''), ?12, ?13
  FROM (SELECT coalesce(?9, strftime('%Y-%m-%d %H:%M:%f', 'now', ?10)) AS at) r
RETURNING id`
)

// Submit implements dialect.Dialect. Tasks of the stage that is open after the
// submission start available (scheduled, if their run_at lies ahead) and the
// rest blocked; openStage then blocks again a started stage above a newly
// arrived lower order.
func (s *SQLite) Submit(ctx context.Context, tx *sql.Tx, sp dialect.SubmitParams) (dialect.SubmitResult, error) {
	var res dialect.SubmitResult
	if len(sp.Tasks) == 0 {
		return res, fmt.Errorf("submit: %w: a submission needs at least one task", dialect.ErrInvalid)
	}
	err := s.inTx(ctx, tx, func(q dialect.Querier) error {
		var cur sql.NullInt64
		var paused bool
		var weight, priority int64
		err := q.QueryRowContext(ctx, processFindSQL, sp.Process).Scan(&res.ProcessID, &cur, &paused, &weight, &priority)
		if errors.Is(err, sql.ErrNoRows) {
			err = q.QueryRowContext(ctx, processCreateSQL, sp.Process).Scan(&res.ProcessID, &cur, &paused, &weight, &priority)
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
		// The open stage's new tasks take their turns now (fair.go), in their
		// own priority order; the others when their stage opens. A paused
		// process opens nothing.
		var opening []int
		for i, t := range sp.Tasks {
			if t.Order == open && !paused {
				opening = append(opening, i)
			}
		}
		slices.SortStableFunc(opening, func(a, b int) int { return sp.Tasks[b].Priority - sp.Tasks[a].Priority })
		vtimes := make([]int64, len(sp.Tasks))
		if len(opening) > 0 {
			base, err := stampBase(ctx, q, res.ProcessID)
			if err != nil {
				return fmt.Errorf("submit: %w", err)
			}
			stride := fairStride(weight)
			for rk, i := range opening {
				vtimes[i] = base + int64(rk)*stride
			}
			if err := stampDone(ctx, q, res.ProcessID, base+int64(len(opening))*stride); err != nil {
				return fmt.Errorf("submit: %w", err)
			}
		}
		res.TaskIDs = make([]int64, len(sp.Tasks))
		for i, t := range sp.Tasks {
			state := dialect.StateBlocked
			if t.Order == open && !paused {
				state = dialect.StateAvailable
			}
			var runAt sql.NullString
			if t.RunAt != nil {
				runAt = sql.NullString{String: formatTime(*t.RunAt), Valid: true}
			}
			if err := q.QueryRowContext(ctx, taskInsertSQL, res.ProcessID, t.Order, t.Kind, t.Body, state,
				t.Priority, t.MaxAttempts, t.Atomic, runAt, offset(t.Delay), t.LimitKey, vtimes[i], priority).Scan(&res.TaskIDs[i]); err != nil {
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
