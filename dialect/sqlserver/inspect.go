package sqlserver

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/stageq/stageq/dialect"
)

var _ dialect.Inspector = (*SQLServer)(nil)

// taskWaitSQL reads what can hold a task back, in one batch of eight result
// sets (dialect.WaitStatements names the columns of each): the task with its
// process and the database's now; the unfinished tasks of lower stages, lowest
// first; the process's running tasks; the limits the task counts against; the
// running tasks of its limit key and of its kind; the live workers; the live
// workers that claim its kind. Every list stops at @Max rows and
// carries COUNT(*) OVER () (computed before TOP) as its last column. Plain
// READ COMMITTED reads, no locks held after each statement: an explanation is a
// snapshot for a person, never a decision. Written from Microsoft's
// documentation (TOP, COUNT OVER, DATEADD). It has run on Babelfish (PostgreSQL
// with a T-SQL parser, dashboard/why_test.go), never on SQL Server itself.
// In: task id, live window in milliseconds, list length.
const taskWaitSQL = `
SET NOCOUNT ON;
DECLARE @TaskId bigint = @pTaskId,
        @LiveMs int = @pLiveMs,
        @Max int = @pMax;
DECLARE @Now datetime2(7) = SYSUTCDATETIME();
DECLARE @LiveSince datetime2(7) = DATEADD(millisecond, -@LiveMs, @Now);
DECLARE @ProcessId bigint, @Order int, @Kind nvarchar(200), @LimitKey nvarchar(200);
SELECT @ProcessId = t.process_id, @Order = t.execution_order, @Kind = t.kind, @LimitKey = t.limit_key
  FROM stageq.Tasks AS t
 WHERE t.id = @TaskId;
SELECT t.id, t.process_id, p.name, t.execution_order, t.kind, t.body, t.state, t.attempt, t.max_attempts,
       t.priority, t.run_at, COALESCE(t.worker_id, N''), COALESCE(t.last_error, N''), COALESCE(t.limit_key, N''),
       t.abandons, p.state, p.paused, p.max_parallel, p.current_order, @Now
  FROM stageq.Tasks AS t JOIN stageq.Processes AS p ON p.id = t.process_id
 WHERE t.id = @TaskId;
SELECT TOP (@Max) t.id, t.process_name, t.execution_order, t.state, COALESCE(t.worker_id, N''), t.run_at, t.attempt, COUNT(*) OVER ()
  FROM stageq.Tasks AS t
 WHERE t.process_id = @ProcessId AND t.execution_order < @Order
 ORDER BY t.execution_order, CASE t.state WHEN 'failed' THEN 0 WHEN 'running' THEN 1 ELSE 2 END, t.id;
SELECT TOP (@Max) t.id, t.process_name, t.execution_order, t.state, COALESCE(t.worker_id, N''), t.run_at, t.attempt, COUNT(*) OVER ()
  FROM stageq.Tasks AS t
 WHERE t.process_id = @ProcessId AND t.state = 'running'
 ORDER BY t.id;
SELECT l.[key], l.max_running
  FROM stageq.Limits AS l
 WHERE l.[key] = @LimitKey OR l.[key] = CONCAT(N'kind:', @Kind)
 ORDER BY l.[key];
SELECT TOP (@Max) t.id, t.process_name, t.execution_order, t.state, COALESCE(t.worker_id, N''), t.run_at, t.attempt, COUNT(*) OVER ()
  FROM stageq.Tasks AS t
 WHERE t.limit_key = @LimitKey AND t.state = 'running'
 ORDER BY t.id;
SELECT TOP (@Max) t.id, t.process_name, t.execution_order, t.state, COALESCE(t.worker_id, N''), t.run_at, t.attempt, COUNT(*) OVER ()
  FROM stageq.Tasks AS t
 WHERE t.kind = @Kind AND t.state = 'running'
 ORDER BY t.id;
SELECT COUNT(*), COALESCE(SUM(w.concurrency), 0),
       (SELECT COUNT(*) FROM stageq.Tasks AS r WHERE r.state = 'running')
  FROM stageq.Workers AS w
 WHERE w.stopped_at IS NULL AND w.heartbeat_at >= @LiveSince;
SELECT TOP (@Max) w.id
  FROM stageq.Workers AS w
 WHERE w.stopped_at IS NULL AND w.heartbeat_at >= @LiveSince
   AND (w.kinds IS NULL OR EXISTS (SELECT 1 FROM OPENJSON(w.kinds) AS k WHERE k.[value] = @Kind))
 ORDER BY w.id;`

// stateCountSQL counts tasks by process, stage and state, largest groups
// first. In: max rows. Out: process name, execution_order, state, count.
const stateCountSQL = `
SET NOCOUNT ON;
DECLARE @Max int = @pMax;
SELECT TOP (@Max) t.process_name, t.execution_order, t.state, COUNT(*) AS n
  FROM stageq.Tasks AS t
 GROUP BY t.process_name, t.execution_order, t.state
 ORDER BY n DESC, t.process_name, t.execution_order, t.state;`

// TaskWait implements dialect.Inspector.
func (d *SQLServer) TaskWait(ctx context.Context, id int64, live time.Duration) (dialect.TaskWait, error) {
	var w dialect.TaskWait
	err := d.retry(ctx, retryAll, func(ctx context.Context) error {
		rows, err := d.db.QueryContext(ctx, taskWaitSQL, bigint("pTaskId", id),
			integer("pLiveMs", clampInt32(live.Milliseconds())), integer("pMax", dialect.WaitListMax))
		if err != nil {
			return err
		}
		defer rows.Close()
		w, err = scanTaskWait(rows, id)
		return err
	})
	if err != nil {
		return w, fmt.Errorf("explain task %d: %w", id, mapErr(err))
	}
	return w, nil
}

// scanTaskWait reads taskWaitSQL's result sets in order.
func scanTaskWait(rows *sql.Rows, id int64) (dialect.TaskWait, error) {
	var w dialect.TaskWait
	t := &w.Task
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return w, err
		}
		return w, fmt.Errorf("task %d: %w (finished tasks leave the queue; see logs)", id, dialect.ErrNotFound)
	}
	if err := dialect.ScanWaitTask(rows.Scan, &w); err != nil {
		return w, err
	}
	for rows.Next() { // the set has one row; the driver moves on only from its end
	}
	refs := func() ([]dialect.TaskRef, int, error) {
		if !rows.NextResultSet() {
			return nil, 0, missing(rows, id, "a task list")
		}
		return dialect.ScanTaskRefs(rows)
	}
	var err error
	if w.Lower, w.LowerCount, err = refs(); err != nil {
		return w, err
	}
	if w.ProcessRunning, w.ProcessRunningCount, err = refs(); err != nil {
		return w, err
	}
	if !rows.NextResultSet() {
		return w, missing(rows, id, "the limits")
	}
	for rows.Next() {
		var l dialect.LimitWait
		if err := rows.Scan(&l.Key, &l.Max); err != nil {
			return w, err
		}
		w.Limits = append(w.Limits, l)
	}
	byKey, byKeyN, err := refs()
	if err != nil {
		return w, err
	}
	byKind, byKindN, err := refs()
	if err != nil {
		return w, err
	}
	for i := range w.Limits {
		if w.Limits[i].Key == dialect.LimitKindPrefix+t.Kind {
			w.Limits[i].Holders, w.Limits[i].Running = byKind, byKindN
		} else {
			w.Limits[i].Holders, w.Limits[i].Running = byKey, byKeyN
		}
	}
	if !rows.NextResultSet() || !rows.Next() {
		return w, missing(rows, id, "the workers")
	}
	if err := rows.Scan(&w.LiveWorkers, &w.LiveSlots, &w.Running); err != nil {
		return w, err
	}
	for rows.Next() {
	}
	if !rows.NextResultSet() {
		return w, missing(rows, id, "the kind workers")
	}
	for rows.Next() {
		var wid string
		if err := rows.Scan(&wid); err != nil {
			return w, err
		}
		w.KindWorkers = append(w.KindWorkers, wid)
	}
	return w, rows.Err()
}

// missing explains a result set that did not come: the batch's error, if a
// statement of it failed, or the set's name.
func missing(rows *sql.Rows, id int64, what string) error {
	if err := rows.Err(); err != nil {
		return err
	}
	return fmt.Errorf("task %d: the result set of %s is missing", id, what)
}

// TaskStateCounts implements dialect.Inspector.
func (d *SQLServer) TaskStateCounts(ctx context.Context, maxRows int) ([]dialect.StateCount, error) {
	var out []dialect.StateCount
	err := d.retry(ctx, retryAll, func(ctx context.Context) error {
		rows, err := d.db.QueryContext(ctx, stateCountSQL, integer("pMax", clampInt32(int64(maxRows))))
		if err != nil {
			return err
		}
		out, err = dialect.ScanStateCounts(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("count tasks by state: %w", mapErr(err))
	}
	return out, nil
}
