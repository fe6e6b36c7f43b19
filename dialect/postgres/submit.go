package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// submitSQL calls submit (routines/postgres/20_submit.sql), which
// validates the batch, creates and locks the process, inserts the tasks and opens
// the right stage. In: process name, JSON array of tasks. Out: one row per task.
const submitSQL = `SELECT process_id, task_id FROM stageq_routines.submit($1, $2::jsonb)`

// Submit implements dialect.Dialect.
func (p *Postgres) Submit(ctx context.Context, tx *sql.Tx, sp dialect.SubmitParams) (dialect.SubmitResult, error) {
	q := dialect.On(p.db, tx) // one statement: atomic on the pool too
	var res dialect.SubmitResult
	payload, err := dialect.TasksJSON(sp.Tasks)
	if err != nil {
		return res, fmt.Errorf("submit: encode tasks: %w", err)
	}
	rows, err := q.QueryContext(ctx, p.calls.SQL(submitSQL), sp.Process, string(payload))
	if err != nil {
		return res, fmt.Errorf("submit: %w", mapErr(err))
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&res.ProcessID, &id); err != nil {
			return res, fmt.Errorf("submit: %w", err)
		}
		res.TaskIDs = append(res.TaskIDs, id)
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("submit: %w", mapErr(err))
	}
	return res, nil
}
