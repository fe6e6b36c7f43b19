package sqlserver

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

var _ dialect.Operator = (*SQLServer)(nil)

// Operator commands (queuectl). Each change runs as one batch with its own
// transaction (nested in the caller's when ProcessConfigure is given one), in the
// queue's lock order: the process row with UPDLOCK first, then its task rows, then
// stageq.OpenStage, which re-derives the stage and stamps the turns of the tasks
// it opens. Tasks put back in the queue go back blocked, so that OpenStage gives
// them a fresh virtual time when their stage is the open one. Bulk changes go
// 1,000 rows per statement, below the lock-escalation threshold, and
// processes.failed_tasks is recounted from the task rows (a seek on
// IX_Tasks_Failed) after every change.
//
// Retry, discard and cancel are audited (issue 10, item 4): every task they
// change leaves a Logs row, outcome 'retried', 'discarded' or 'cancelled', with
// worker_id naming who (dialect.Actor: user@host from queuectl) and the time.
// The rows come from the OUTPUT of the UPDATE or DELETE itself (into @Changed,
// then into Logs, 1,000 per statement), so exactly the tasks changed are
// recorded, with the attempt they had. A discard or cancel that removed a task
// passes @EndState = 'cancelled' to OpenStage (migration 8), so a process it
// emptied ends 'cancelled' instead of 'succeeded' (item 3); one still holding a
// failed task stays 'failed'.

// processOpSQL changes one process, named @Name, under its row lock. @Op is
// 'configure' (priority, weight, max_parallel: each applied when its flag is set;
// max_parallel 0 removes the cap), 'pause' / 'resume', 'retry' (failed tasks run
// again with fresh attempts and a fresh abandon budget, blocked when their stage
// is not the open one),
// 'discard' (failed tasks removed as finished) or 'cancel' (every task that is not
// running removed). @Who and @Note (the Logs.error text) go into the audit rows of
// retry, discard and cancel. Out: found (0/1), rows changed, tasks still running.
const processOpSQL = `
SET NOCOUNT ON;
SET XACT_ABORT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @Name nvarchar(400) = @pName,
        @Op varchar(10) = @pOp,
        @Priority int = @pPriority,
        @SetPriority bit = @pSetPriority,
        @Weight int = @pWeight,
        @SetWeight bit = @pSetWeight,
        @MaxParallel int = @pMaxParallel,
        @SetMaxParallel bit = @pSetMaxParallel,
        @Who nvarchar(200) = @pWho,
        @Note nvarchar(max) = @pNote,
        @Pid bigint, @Cur int, @Rows int = 0, @Batch int, @Running int = 0,
        @Outcome varchar(20), @EndState varchar(20) = 'succeeded',
        @Now datetime2(7) = SYSUTCDATETIME();
DECLARE @Changed TABLE (
    id bigint NOT NULL PRIMARY KEY, process_id bigint NOT NULL, process_name nvarchar(200) NOT NULL,
    execution_order int NOT NULL, kind nvarchar(200) NOT NULL, body nvarchar(max) NOT NULL,
    attempt int NOT NULL, schedule_name nvarchar(200) NULL, scheduled_for datetime2(7) NULL);
BEGIN TRANSACTION;
SELECT @Pid = p.id, @Cur = p.current_order
  FROM stageq.Processes AS p WITH (UPDLOCK, ROWLOCK, INDEX(UQ_Processes_name))
 WHERE p.name = @Name;
IF @Pid IS NOT NULL
BEGIN
    IF @Op = 'configure'
    BEGIN
        -- A new priority reaches the waiting tasks' copy of it; a new weight
        -- re-spaces their turns (stageq.Configure).
        IF @SetPriority = 0 SET @Priority = NULL;
        IF @SetWeight = 0 SET @Weight = NULL;
        IF @SetMaxParallel = 0 SET @MaxParallel = NULL;
        EXEC stageq_routines.Configure @ProcessId = @Pid, @Priority = @Priority, @Weight = @Weight,
             @MaxParallel = @MaxParallel;
        SET @Rows = 1;
    END
    ELSE IF @Op IN ('pause', 'resume')
    BEGIN
        UPDATE stageq.Processes SET paused = CASE WHEN @Op = 'pause' THEN 1 ELSE 0 END, updated_at = @Now
         WHERE id = @Pid;
        SET @Rows = @@ROWCOUNT;
    END
    ELSE IF @Op IN ('retry', 'discard', 'cancel')
    BEGIN
        -- Each pass changes at most 1,000 tasks and writes their audit rows from
        -- its OUTPUT (deleted.*: the task as it was, attempt included).
        SET @Outcome = CASE @Op WHEN 'retry' THEN 'retried' WHEN 'discard' THEN 'discarded' ELSE 'cancelled' END;
        WHILE 1 = 1
        BEGIN
            IF @Op = 'retry'
            BEGIN
                UPDATE TOP (1000) t
                   SET state = 'blocked', attempt = 0, abandons = 0, run_at = @Now
                OUTPUT deleted.id, deleted.process_id, deleted.process_name, deleted.execution_order, deleted.kind,
                       deleted.body, deleted.attempt, deleted.schedule_name, deleted.scheduled_for
                  INTO @Changed (id, process_id, process_name, execution_order, kind, body, attempt,
                                 schedule_name, scheduled_for)
                  FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(IX_Tasks_Failed))
                 WHERE t.process_id = @Pid AND t.state = 'failed';
                SET @Batch = @@ROWCOUNT;
            END
            ELSE IF @Op = 'discard'
            BEGIN
                DELETE TOP (1000) t
                OUTPUT deleted.id, deleted.process_id, deleted.process_name, deleted.execution_order, deleted.kind,
                       deleted.body, deleted.attempt, deleted.schedule_name, deleted.scheduled_for
                  INTO @Changed (id, process_id, process_name, execution_order, kind, body, attempt,
                                 schedule_name, scheduled_for)
                  FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(IX_Tasks_Failed))
                 WHERE t.process_id = @Pid AND t.state = 'failed';
                SET @Batch = @@ROWCOUNT;
            END
            ELSE
            BEGIN
                DELETE TOP (1000) t
                OUTPUT deleted.id, deleted.process_id, deleted.process_name, deleted.execution_order, deleted.kind,
                       deleted.body, deleted.attempt, deleted.schedule_name, deleted.scheduled_for
                  INTO @Changed (id, process_id, process_name, execution_order, kind, body, attempt,
                                 schedule_name, scheduled_for)
                  FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(IX_Tasks_Stage))
                 WHERE t.process_id = @Pid AND t.state IN ('blocked', 'scheduled', 'available', 'failed');
                SET @Batch = @@ROWCOUNT;
            END;
            SET @Rows = @Rows + @Batch;
            INSERT INTO stageq.Logs (task_id, process_id, process_name, execution_order, kind, body, worker_id,
                                     attempt, lease_token, started_at, ended_at, duration_ms, outcome, error,
                                     schedule_name, scheduled_for)
            SELECT c.id, c.process_id, c.process_name, c.execution_order, c.kind, c.body, @Who,
                   c.attempt, 0, @Now, @Now, 0, @Outcome, @Note, c.schedule_name, c.scheduled_for
              FROM @Changed AS c;
            DELETE FROM @Changed;
            IF @Batch < 1000 BREAK;
        END;
        IF @Op <> 'retry' AND @Rows > 0
            SET @EndState = 'cancelled';
    END
    ELSE
        THROW 50006, N'stageq: unknown process operation', 1;

    SELECT @Running = COUNT(*)
      FROM stageq.Tasks AS r WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Running))
     WHERE r.process_id = @Pid AND r.state = 'running';
    UPDATE stageq.Processes
       SET failed_tasks = (SELECT COUNT(*) FROM stageq.Tasks AS f WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Failed))
                            WHERE f.process_id = @Pid AND f.state = 'failed')
     WHERE id = @Pid;
    EXEC stageq_routines.OpenStage @ProcessId = @Pid, @EndState = @EndState;
END;
COMMIT TRANSACTION;
SELECT CASE WHEN @Pid IS NULL THEN 0 ELSE 1 END, @Rows, @Running;`

// auditOutcomes are the operations that leave a Logs row per task they change.
var auditOutcomes = map[string]dialect.Outcome{
	"retry":   dialect.OutcomeRetried,
	"discard": dialect.OutcomeDiscarded,
	"cancel":  dialect.OutcomeCancelled,
}

// auditNote is the Logs.error text of op's audit rows ("" for an operation that
// writes none).
func auditNote(op string) string {
	if o, ok := auditOutcomes[op]; ok {
		return dialect.AuditNote(o)
	}
	return ""
}

// actor is who the audit rows name (dialect.Actor), cut to the 200 UTF-16 code
// units Logs.worker_id holds, on a character boundary: an operator's long
// user@host must not refuse the command, and the batch's nvarchar(200) local
// would otherwise cut it silently, possibly inside a surrogate pair.
func actor(ctx context.Context) string {
	who := dialect.Actor(ctx)
	n := 0
	for i, r := range who {
		w := 1
		if r > 0xFFFF {
			w = 2
		}
		if n+w > maxName {
			return who[:i]
		}
		n += w
	}
	return who
}

// processOp runs processOpSQL, in the caller's transaction tx or on the pool.
func (d *SQLServer) processOp(ctx context.Context, tx *sql.Tx, name, op string, s dialect.ProcessSettings) (rows, running int, err error) {
	if err := checkLen("process name", name, maxName); err != nil {
		return 0, 0, err
	}
	var found int
	who, note := actor(ctx), auditNote(op)
	q := dialect.On(d.db, tx)
	run := func(ctx context.Context) error {
		return q.QueryRowContext(ctx, d.calls.SQL(processOpSQL),
			nvarchar("pName", name),
			nvarchar("pOp", op),
			integer("pPriority", optInt(s.Priority)), bit("pSetPriority", s.Priority != nil),
			integer("pWeight", optInt(s.Weight)), bit("pSetWeight", s.Weight != nil),
			integer("pMaxParallel", optInt(s.MaxParallel)), bit("pSetMaxParallel", s.MaxParallel != nil),
			nvarchar("pWho", who), nvarchar("pNote", note)).Scan(&found, &rows, &running)
	}
	err = d.retryOn(ctx, tx, retrySafe, run)
	if err != nil {
		return 0, 0, mapErr(err)
	}
	if found == 0 {
		return 0, 0, fmt.Errorf("process %q: %w", name, dialect.ErrNotFound)
	}
	return rows, running, nil
}

// ProcessConfigure implements dialect.Operator.
func (d *SQLServer) ProcessConfigure(ctx context.Context, tx *sql.Tx, name string, s dialect.ProcessSettings) error {
	if err := dialect.ValidateSettings(s); err != nil {
		return fmt.Errorf("configure process %q: %w", name, err)
	}
	if _, _, err := d.processOp(ctx, tx, name, "configure", s); err != nil {
		return fmt.Errorf("configure process %q: %w", name, err)
	}
	return nil
}

// ProcessSetPaused implements dialect.Operator.
func (d *SQLServer) ProcessSetPaused(ctx context.Context, name string, paused bool) error {
	op := "resume"
	if paused {
		op = "pause"
	}
	if _, _, err := d.processOp(ctx, nil, name, op, dialect.ProcessSettings{}); err != nil {
		return fmt.Errorf("%s process %q: %w", op, name, err)
	}
	return nil
}

// ProcessRetry implements dialect.Operator.
func (d *SQLServer) ProcessRetry(ctx context.Context, name string) (int, error) {
	return d.processFailed(ctx, name, "retry")
}

// ProcessDiscard implements dialect.Operator.
func (d *SQLServer) ProcessDiscard(ctx context.Context, name string) (int, error) {
	return d.processFailed(ctx, name, "discard")
}

// processFailed runs op ('retry' or 'discard') on a process's failed tasks and
// insists it changed something, so that a command with nothing to do says so.
func (d *SQLServer) processFailed(ctx context.Context, name, op string) (int, error) {
	n, _, err := d.processOp(ctx, nil, name, op, dialect.ProcessSettings{})
	if err == nil && n == 0 {
		err = fmt.Errorf("%w: it has no failed tasks", dialect.ErrWrongState)
	}
	if err != nil {
		return 0, fmt.Errorf("%s process %q: %w", op, name, err)
	}
	return n, nil
}

// ProcessCancel implements dialect.Operator.
func (d *SQLServer) ProcessCancel(ctx context.Context, name string) (removed, running int, err error) {
	removed, running, err = d.processOp(ctx, nil, name, "cancel", dialect.ProcessSettings{})
	if err == nil && removed == 0 {
		err = fmt.Errorf("%w: it has no waiting or failed tasks (%d running)", dialect.ErrWrongState, running)
	}
	if err != nil {
		return 0, running, fmt.Errorf("cancel process %q: %w", name, err)
	}
	return removed, running, nil
}

// taskOpSQL retries, discards or cancels one task (@Op 'retry', 'discard',
// 'cancel'). The task's process id is read holding nothing; then the process row
// is locked, then the task row, whose state decides: retry and discard need a
// failed task, cancel one that is not running. The change leaves its audit row
// (from its OUTPUT, as in processOpSQL, naming @Who); a discard or cancel passes
// @EndState = 'cancelled' to OpenStage. Out: found (0/1), the task's state and
// worker, rows changed (0: not allowed in that state).
const taskOpSQL = `
SET NOCOUNT ON;
SET XACT_ABORT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @TaskId bigint = @pTaskId,
        @Op varchar(10) = @pOp,
        @Who nvarchar(200) = @pWho,
        @Note nvarchar(max) = @pNote,
        @Pid bigint, @Cur int, @State varchar(20), @Worker nvarchar(200), @Rows int = 0,
        @Outcome varchar(20), @EndState varchar(20) = 'succeeded',
        @Now datetime2(7) = SYSUTCDATETIME();
DECLARE @Changed TABLE (
    id bigint NOT NULL PRIMARY KEY, process_id bigint NOT NULL, process_name nvarchar(200) NOT NULL,
    execution_order int NOT NULL, kind nvarchar(200) NOT NULL, body nvarchar(max) NOT NULL,
    attempt int NOT NULL, schedule_name nvarchar(200) NULL, scheduled_for datetime2(7) NULL);
SELECT @Pid = t.process_id FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(PK_Tasks)) WHERE t.id = @TaskId;
IF @Pid IS NOT NULL
BEGIN
    BEGIN TRANSACTION;
    SELECT @Cur = p.current_order
      FROM stageq.Processes AS p WITH (UPDLOCK, ROWLOCK, INDEX(PK_Processes))
     WHERE p.id = @Pid;
    SELECT @State = t.state, @Worker = t.worker_id
      FROM stageq.Tasks AS t WITH (UPDLOCK, ROWLOCK, INDEX(PK_Tasks))
     WHERE t.id = @TaskId;
    IF (@Op IN ('retry', 'discard') AND @State = 'failed') OR (@Op = 'cancel' AND @State <> 'running')
    BEGIN
        IF @Op = 'retry'
        BEGIN
            UPDATE t
               SET state = 'blocked', attempt = 0, abandons = 0, run_at = @Now
            OUTPUT deleted.id, deleted.process_id, deleted.process_name, deleted.execution_order, deleted.kind,
                   deleted.body, deleted.attempt, deleted.schedule_name, deleted.scheduled_for
              INTO @Changed (id, process_id, process_name, execution_order, kind, body, attempt,
                             schedule_name, scheduled_for)
              FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(PK_Tasks))
             WHERE t.id = @TaskId;
            SET @Rows = @@ROWCOUNT;
            SET @Outcome = 'retried';
        END
        ELSE
        BEGIN
            DELETE t
            OUTPUT deleted.id, deleted.process_id, deleted.process_name, deleted.execution_order, deleted.kind,
                   deleted.body, deleted.attempt, deleted.schedule_name, deleted.scheduled_for
              INTO @Changed (id, process_id, process_name, execution_order, kind, body, attempt,
                             schedule_name, scheduled_for)
              FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(PK_Tasks))
             WHERE t.id = @TaskId;
            SET @Rows = @@ROWCOUNT;
            SET @Outcome = CASE @Op WHEN 'discard' THEN 'discarded' ELSE 'cancelled' END;
            IF @Rows > 0
                SET @EndState = 'cancelled';
        END;
        INSERT INTO stageq.Logs (task_id, process_id, process_name, execution_order, kind, body, worker_id,
                                 attempt, lease_token, started_at, ended_at, duration_ms, outcome, error,
                                 schedule_name, scheduled_for)
        SELECT c.id, c.process_id, c.process_name, c.execution_order, c.kind, c.body, @Who,
               c.attempt, 0, @Now, @Now, 0, @Outcome, @Note, c.schedule_name, c.scheduled_for
          FROM @Changed AS c;
        UPDATE stageq.Processes
           SET failed_tasks = (SELECT COUNT(*) FROM stageq.Tasks AS f WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Failed))
                                WHERE f.process_id = @Pid AND f.state = 'failed')
         WHERE id = @Pid;
        EXEC stageq_routines.OpenStage @ProcessId = @Pid, @EndState = @EndState;
    END;
    COMMIT TRANSACTION;
END;
SELECT CASE WHEN @State IS NULL THEN 0 ELSE 1 END, COALESCE(@State, ''), COALESCE(@Worker, N''), @Rows;`

func (d *SQLServer) taskOp(ctx context.Context, id int64, op string, allow func(state, worker string) error) error {
	var found, rows int
	var state, worker string
	who, note := actor(ctx), auditNote(op)
	err := d.retry(ctx, retrySafe, func(ctx context.Context) error {
		return d.db.QueryRowContext(ctx, d.calls.SQL(taskOpSQL), bigint("pTaskId", id), nvarchar("pOp", op),
			nvarchar("pWho", who), nvarchar("pNote", note)).Scan(&found, &state, &worker, &rows)
	})
	switch {
	case err != nil:
		return fmt.Errorf("%s task %d: %w", op, id, mapErr(err))
	case found == 0:
		return fmt.Errorf("task %d: %w (finished tasks leave the queue; see logs)", id, dialect.ErrNotFound)
	case rows == 0:
		if err := allow(state, worker); err != nil {
			return fmt.Errorf("%s task %d: %w", op, id, err)
		}
		return fmt.Errorf("%s task %d: %w: it changed meanwhile", op, id, dialect.ErrWrongState)
	}
	return nil
}

// TaskRetry implements dialect.Operator.
func (d *SQLServer) TaskRetry(ctx context.Context, id int64) error {
	return d.taskOp(ctx, id, "retry", dialect.AllowRetry)
}

// TaskDiscard implements dialect.Operator.
func (d *SQLServer) TaskDiscard(ctx context.Context, id int64) error {
	return d.taskOp(ctx, id, "discard", dialect.AllowDiscard)
}

// TaskCancel implements dialect.Operator.
func (d *SQLServer) TaskCancel(ctx context.Context, id int64) error {
	return d.taskOp(ctx, id, "cancel", dialect.AllowCancel)
}

// processListSQL reads processes. In: name (empty for all), include finished ones
// (succeeded or cancelled; a named process is always read).
// Out: id, name, state, paused, current order, priority, weight, max_parallel.
const processListSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(400) = @pName,
        @All bit = @pAll;
SELECT p.id, p.name, p.state, p.paused, p.current_order, p.priority, p.weight, p.max_parallel
  FROM stageq.Processes AS p
 WHERE (@Name = N'' OR p.name = @Name) AND (@All = 1 OR @Name <> N'' OR p.state NOT IN ('succeeded', 'cancelled'))
 ORDER BY p.name
OPTION (RECOMPILE);`

// stageCountSQL counts the queued tasks per process, stage and state. In: as
// processListSQL. Out: process id, order, pending, running, failed.
const stageCountSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(400) = @pName,
        @All bit = @pAll;
SELECT t.process_id, t.execution_order,
       SUM(CASE WHEN t.state IN ('blocked', 'scheduled', 'available') THEN 1 ELSE 0 END),
       SUM(CASE WHEN t.state = 'running' THEN 1 ELSE 0 END),
       SUM(CASE WHEN t.state = 'failed' THEN 1 ELSE 0 END)
  FROM stageq.Tasks AS t
  JOIN stageq.Processes AS p ON p.id = t.process_id
 WHERE (@Name = N'' OR p.name = @Name) AND (@All = 1 OR @Name <> N'' OR p.state NOT IN ('succeeded', 'cancelled'))
 GROUP BY t.process_id, t.execution_order
OPTION (RECOMPILE);`

// stageDoneSQL counts the tasks that succeeded, from Logs (they left Tasks). In:
// as processListSQL. Out: process id, order, done.
const stageDoneSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(400) = @pName,
        @All bit = @pAll;
SELECT l.process_id, l.execution_order, COUNT(DISTINCT l.task_id)
  FROM stageq.Logs AS l
  JOIN stageq.Processes AS p ON p.id = l.process_id
 WHERE (@Name = N'' OR p.name = @Name) AND (@All = 1 OR @Name <> N'' OR p.state NOT IN ('succeeded', 'cancelled'))
   AND l.outcome = 'succeeded'
 GROUP BY l.process_id, l.execution_order
OPTION (RECOMPILE);`

// ProcessList implements dialect.Operator (sqlbase: the three reads retry
// together).
func (d *SQLServer) ProcessList(ctx context.Context, f dialect.ProcessFilter) ([]dialect.ProcessStatus, error) {
	return d.base.ProcessList(ctx, f)
}

// workerListSQL reads the Workers table with each worker's running tasks and the
// database's now, most recent heartbeat first. No parameters.
const workerListSQL = `
SET NOCOUNT ON;
SELECT w.id, w.hostname, w.pid, w.concurrency, w.version, w.started_at, w.heartbeat_at, w.stopped_at,
       (SELECT COUNT(*) FROM stageq.Tasks AS t WITH (INDEX(IX_Tasks_Running))
         WHERE t.worker_id = w.id AND t.state = 'running'),
       SYSUTCDATETIME()
  FROM stageq.Workers AS w
 ORDER BY w.heartbeat_at DESC, w.id;`

// WorkerList implements dialect.Operator (sqlbase).
func (d *SQLServer) WorkerList(ctx context.Context) ([]dialect.WorkerStatus, error) {
	return d.base.WorkerList(ctx)
}
