package sqlserver

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/stageq/stageq/dialect"
)

// submitSQL calls Submit (routines/sqlserver/30_Submit.sql), which validates the batch,
// locks or creates the process, applies its scheduling settings, inserts the
// tasks and opens the right stage, all or nothing. In: process name, the tasks as
// a JSON array (dialect.TasksJSON), and each process setting with a flag saying
// whether it is set. Out: one row (process_id, task_id) per task, in order.
const submitSQL = `
SET NOCOUNT ON;
DECLARE @Process nvarchar(400) = @pProcess,
        @Tasks nvarchar(max) = @pTasks,` + processSettingsLocals + `
EXEC stageq_routines.Submit @Process = @Process, @Tasks = @Tasks, @Priority = @Priority,
     @Weight = @Weight, @MaxParallel = @MaxParallel;`

// Submit implements dialect.Dialect. On the pool it is retried only after errors
// that guarantee nothing was committed; inside the caller's transaction it is
// never retried (see IsRetryable).
func (d *SQLServer) Submit(ctx context.Context, tx *sql.Tx, sp dialect.SubmitParams) (dialect.SubmitResult, error) {
	q := dialect.On(d.db, tx)
	var res dialect.SubmitResult
	var set dialect.ProcessSettings
	if sp.Settings != nil {
		if err := dialect.ValidateSettings(*sp.Settings); err != nil {
			return res, fmt.Errorf("submit: %w", err)
		}
		set = *sp.Settings
	}
	// SQL Server keeps 7 fractional digits; Go marshals up to 9, which
	// datetimeoffset would refuse. Truncating to 100 ns changes nothing stored.
	tasks := make([]dialect.NewTask, len(sp.Tasks))
	for i, t := range sp.Tasks {
		if t.RunAt != nil {
			at := t.RunAt.Truncate(100 * time.Nanosecond)
			t.RunAt = &at
		}
		tasks[i] = t
	}
	payload, err := dialect.TasksJSON(tasks)
	if err != nil {
		return res, fmt.Errorf("submit: encode tasks: %w", err)
	}
	priority, weight, maxParallel := optInt(set.Priority), optInt(set.Weight), optInt(set.MaxParallel)

	run := func(ctx context.Context) error {
		res = dialect.SubmitResult{}
		rows, err := q.QueryContext(ctx, d.calls.SQL(submitSQL),
			nvarchar("pProcess", sp.Process),
			nvarchar("pTasks", string(payload)),
			integer("pPriority", priority), bit("pSetPriority", set.Priority != nil),
			integer("pWeight", weight), bit("pSetWeight", set.Weight != nil),
			integer("pMaxParallel", maxParallel), bit("pSetMaxParallel", set.MaxParallel != nil))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&res.ProcessID, &id); err != nil {
				return err
			}
			res.TaskIDs = append(res.TaskIDs, id)
		}
		return rows.Err()
	}
	err = d.retryOn(ctx, tx, retrySafe, run)
	if err != nil {
		return dialect.SubmitResult{}, fmt.Errorf("submit: %w", mapErr(err))
	}
	return res, nil
}

func optInt(p *int) int32 {
	if p == nil {
		return 0
	}
	return clampInt32(int64(*p))
}
