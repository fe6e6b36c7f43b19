package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// The stage barrier. A process's tasks of its lowest ExecutionOrder are
// 'available'; all higher ones wait 'blocked'. openStage re-derives that after
// anything that can change the lowest order (a submission, a task leaving),
// always inside the caller's write transaction. Each statement is a seek on
// stageq_tasks_stage (process_id, execution_order).
const (
	stageCurrentSQL = `SELECT current_order FROM stageq_processes WHERE id = ?`
	stageLowestSQL  = `SELECT min(execution_order) FROM stageq_tasks WHERE process_id = ?`
	stageDoneSQL    = `
UPDATE stageq_processes
   SET current_order = NULL, state = 'succeeded',
       updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), finished_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
 WHERE id = ?`
	// A lower order arrived: tasks above it that have not started wait again.
	stageBlockSQL = `
UPDATE stageq_tasks SET state = 'blocked'
 WHERE process_id = ? AND execution_order > ? AND state = 'available'`
	stageOpenSQL = `
UPDATE stageq_tasks SET state = 'available'
 WHERE process_id = ? AND execution_order = ? AND state = 'blocked'`
	stageSetSQL = `
UPDATE stageq_processes
   SET current_order = ?,
       state = CASE WHEN EXISTS (SELECT 1 FROM stageq_tasks WHERE process_id = ? AND state = 'failed')
                    THEN 'failed' ELSE 'active' END,
       updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), finished_at = NULL
 WHERE id = ?`
)

func openStage(ctx context.Context, q dialect.Querier, processID int64) error {
	var old, lowest sql.NullInt64
	if err := q.QueryRowContext(ctx, stageCurrentSQL, processID).Scan(&old); err != nil {
		return fmt.Errorf("open stage: read process %d: %w", processID, err)
	}
	if err := q.QueryRowContext(ctx, stageLowestSQL, processID).Scan(&lowest); err != nil {
		return fmt.Errorf("open stage: lowest order of process %d: %w", processID, err)
	}
	if !lowest.Valid {
		if _, err := q.ExecContext(ctx, stageDoneSQL, processID); err != nil {
			return fmt.Errorf("open stage: finish process %d: %w", processID, err)
		}
		return refreshProcess(ctx, q, processID) // fairness (limits.go): leaves the run queue
	}
	if old.Valid && lowest.Int64 < old.Int64 {
		if _, err := q.ExecContext(ctx, stageBlockSQL, processID, lowest.Int64); err != nil {
			return fmt.Errorf("open stage: block above %d: %w", lowest.Int64, err)
		}
	}
	if !old.Valid || old.Int64 != lowest.Int64 {
		if _, err := q.ExecContext(ctx, stageOpenSQL, processID, lowest.Int64); err != nil {
			return fmt.Errorf("open stage %d: %w", lowest.Int64, err)
		}
	}
	if _, err := q.ExecContext(ctx, stageSetSQL, lowest.Int64, processID, processID); err != nil {
		return fmt.Errorf("open stage: update process %d: %w", processID, err)
	}
	return refreshProcess(ctx, q, processID) // fairness (limits.go): run-queue state
}
