package sqlserver

import (
	"context"

	"github.com/stageq/stageq/dialect"
)

var _ dialect.Operator = (*SQLServer)(nil)

// Operator commands (queuectl, the dashboard). sqlbase runs them (base.go): each
// in one transaction of its own (or the caller's, for ProcessConfigure), in the
// queue's lock order: the process row with UPDLOCK first, then its task rows,
// then stageq.OpenStage, which re-derives the stage and stamps the turns of the
// tasks it opens. Tasks put back in the queue go back blocked, so that OpenStage
// gives them a fresh virtual time when their stage is the open one. Bulk
// changes go 1,000 rows per statement, below the lock-escalation threshold, and
// processes.failed_tasks is recounted from the task rows (a seek on
// IX_Tasks_Failed) before every OpenStage.
//
// Retry, discard and cancel are audited (issue 10, item 4): every task they
// change leaves a Logs row, outcome 'retried', 'discarded' or 'cancelled', with
// worker_id naming who (dialect.Actor: user@host from queuectl) and the time.
// Retry and discard write the rows of a process's failed tasks before changing
// them, under the process's lock (failed tasks change only under it); a cancel
// takes the rows from its DELETE's OUTPUT, since a claim may take an available
// task at any moment (claims lock no process row). A discard or cancel that
// emptied its process marks it cancelled after OpenStage called it succeeded.
//
// The statements whose answer is a number of rows changed end with it as
// their one row (sqlbase.Base.CountsAsRow), counted with @@ROWCOUNT after
// each statement: the driver's rows affected would add up every count the
// batch sends, a trigger's included.

// lockProcessSQL reads a process's id by name and holds an update lock on its
// row to the end of the transaction. In: name. Out: id.
const lockProcessSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(400) = @pName;
SELECT p.id FROM stageq.Processes AS p WITH (UPDLOCK, ROWLOCK, INDEX(UQ_Processes_name)) WHERE p.name = @Name;`

// lockProcessByIDSQL holds an update lock on a process row to the end of the
// transaction and reads it back (FK_Tasks_Processes keeps a task's process,
// so a row always comes back for a task's process here). In: process id.
// Out: id.
const lockProcessByIDSQL = `
SET NOCOUNT ON;
DECLARE @Pid bigint = @pProcessId;
SELECT p.id FROM stageq.Processes AS p WITH (UPDLOCK, ROWLOCK, INDEX(PK_Processes)) WHERE p.id = @Pid;`

// pauseSQL sets a process's paused flag. In: process id, paused.
const pauseSQL = `
SET NOCOUNT ON;
DECLARE @Pid bigint = @pProcessId,
        @Paused bit = @pPaused;
UPDATE stageq.Processes SET paused = @Paused, updated_at = SYSUTCDATETIME() WHERE id = @Pid;`

// auditLocals begins the statements that write operator audit rows for a
// process (audit failed, cancel): the process and the audit row's who,
// outcome, note and time. It leaves the DECLARE list open for the statement's
// own locals.
const auditLocals = `
SET NOCOUNT ON;
DECLARE @Pid bigint = @pProcessId,
        @Who nvarchar(200) = @pWho,
        @Outcome varchar(20) = @pOutcome,
        @Note nvarchar(max) = @pNote,
        @Now datetime2(7) = SYSUTCDATETIME(),`

// auditLogsInsert is the column list of an operator's Logs row: the task as it
// was, with who did it as its worker, lease token 0 and no duration.
const auditLogsInsert = `INSERT INTO stageq.Logs (task_id, process_id, process_name, execution_order, kind, body, worker_id,
                             attempt, lease_token, started_at, ended_at, duration_ms, outcome, error,
                             schedule_name, scheduled_for)`

// auditFailedSQL writes a Logs row per failed task of a process, 1,000 rows
// per statement in task id order. In: process id, who, outcome, note.
const auditFailedSQL = auditLocals + `
        @After bigint = 0,
        @Batch int = 1000;
DECLARE @Written TABLE (task_id bigint NOT NULL PRIMARY KEY);
WHILE @Batch = 1000
BEGIN
    ` + auditLogsInsert + `
    OUTPUT inserted.task_id INTO @Written (task_id)
    SELECT TOP (1000) t.id, t.process_id, t.process_name, t.execution_order, t.kind, t.body, @Who,
           t.attempt, 0, @Now, @Now, 0, @Outcome, @Note, t.schedule_name, t.scheduled_for
      FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Failed))
     WHERE t.process_id = @Pid AND t.state = 'failed' AND t.id > @After
     ORDER BY t.id;
    SET @Batch = @@ROWCOUNT;
    SELECT @After = COALESCE(MAX(w.task_id), @After) FROM @Written AS w;
    DELETE FROM @Written;
END;`

// batchLoopEnd closes a WHILE @Batch = 1000 loop whose statement changes at
// most 1,000 rows (below the 5,000 locks at which SQL Server attempts lock
// escalation): it counts the rows into @Rows, stops after a short batch and
// answers the total.
const batchLoopEnd = `
    SET @Batch = @@ROWCOUNT;
    SET @Rows = @Rows + @Batch;
END;
SELECT @Rows;`

// retryProcessSQL puts every failed task of a process back, blocked, with fresh
// attempts and a fresh abandon budget. In: process id. Out: tasks changed.
const retryProcessSQL = `
SET NOCOUNT ON;
DECLARE @Pid bigint = @pProcessId,
        @Now datetime2(7) = SYSUTCDATETIME(),
        @Batch int = 1000,
        @Rows int = 0;
WHILE @Batch = 1000
BEGIN
    UPDATE TOP (1000) t
       SET state = 'blocked', attempt = 0, abandons = 0, run_at = @Now
      FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(IX_Tasks_Failed))
     WHERE t.process_id = @Pid AND t.state = 'failed';` + batchLoopEnd

// discardProcessSQL removes every failed task of a process. In: process id.
// Out: tasks removed.
const discardProcessSQL = `
SET NOCOUNT ON;
DECLARE @Pid bigint = @pProcessId,
        @Batch int = 1000,
        @Rows int = 0;
WHILE @Batch = 1000
BEGIN
    DELETE TOP (1000) t
      FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(IX_Tasks_Failed))
     WHERE t.process_id = @Pid AND t.state = 'failed';` + batchLoopEnd

// cancelProcessSQL removes every task of a process that is not running, and
// writes each one's Logs row from the DELETE's OUTPUT (the task as it was,
// attempt included). In: process id, who, outcome, note. Out: tasks removed.
const cancelProcessSQL = auditLocals + `
        @Batch int = 1000,
        @Rows int = 0;
DECLARE @Changed TABLE (
    id bigint NOT NULL PRIMARY KEY, process_id bigint NOT NULL, process_name nvarchar(200) NOT NULL,
    execution_order int NOT NULL, kind nvarchar(200) NOT NULL, body nvarchar(max) NOT NULL,
    attempt int NOT NULL, schedule_name nvarchar(200) NULL, scheduled_for datetime2(7) NULL);
WHILE @Batch = 1000
BEGIN
    DELETE TOP (1000) t
    OUTPUT deleted.id, deleted.process_id, deleted.process_name, deleted.execution_order, deleted.kind,
           deleted.body, deleted.attempt, deleted.schedule_name, deleted.scheduled_for
      INTO @Changed (id, process_id, process_name, execution_order, kind, body, attempt,
                     schedule_name, scheduled_for)
      FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(IX_Tasks_Stage))
     WHERE t.process_id = @Pid AND t.state IN ('blocked', 'scheduled', 'available', 'failed');
    SET @Batch = @@ROWCOUNT;
    SET @Rows = @Rows + @Batch;
    ` + auditLogsInsert + `
    SELECT c.id, c.process_id, c.process_name, c.execution_order, c.kind, c.body, @Who,
           c.attempt, 0, @Now, @Now, 0, @Outcome, @Note, c.schedule_name, c.scheduled_for
      FROM @Changed AS c;
    DELETE FROM @Changed;
END;
SELECT @Rows;`

// runningSQL counts a process's running tasks. In: process id. Out: count.
const runningSQL = `
SET NOCOUNT ON;
DECLARE @Pid bigint = @pProcessId;
SELECT COUNT(*) FROM stageq.Tasks AS r WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Running))
 WHERE r.process_id = @Pid AND r.state = 'running';`

// taskProcessSQL reads a task's process id, holding nothing (the process row
// is locked next, then the task). In: task id. Out: process id.
const taskProcessSQL = `
SET NOCOUNT ON;
DECLARE @TaskId bigint = @pTaskId;
SELECT t.process_id FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(PK_Tasks)) WHERE t.id = @TaskId;`

// taskLockSQL reads a task's state and worker with an update lock held to the
// end of the transaction. In: task id. Out: state, worker (empty for none).
const taskLockSQL = `
SET NOCOUNT ON;
DECLARE @TaskId bigint = @pTaskId;
SELECT t.state, COALESCE(t.worker_id, N'')
  FROM stageq.Tasks AS t WITH (UPDLOCK, ROWLOCK, INDEX(PK_Tasks))
 WHERE t.id = @TaskId;`

// auditTaskSQL writes the Logs row of an operator action on one task. In: task
// id, who, outcome, note.
const auditTaskSQL = `
SET NOCOUNT ON;
DECLARE @TaskId bigint = @pTaskId,
        @Who nvarchar(200) = @pWho,
        @Outcome varchar(20) = @pOutcome,
        @Note nvarchar(max) = @pNote,
        @Now datetime2(7) = SYSUTCDATETIME();
` + auditLogsInsert + `
SELECT t.id, t.process_id, t.process_name, t.execution_order, t.kind, t.body, @Who,
       t.attempt, 0, @Now, @Now, 0, @Outcome, @Note, t.schedule_name, t.scheduled_for
  FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(PK_Tasks))
 WHERE t.id = @TaskId;`

// retryTaskSQL puts one task back, blocked, with fresh attempts and a fresh
// abandon budget. In: task id.
const retryTaskSQL = `
SET NOCOUNT ON;
DECLARE @TaskId bigint = @pTaskId;
UPDATE t
   SET state = 'blocked', attempt = 0, abandons = 0, run_at = SYSUTCDATETIME()
  FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(PK_Tasks))
 WHERE t.id = @TaskId;`

// deleteTaskSQL removes one task. In: task id.
const deleteTaskSQL = `
SET NOCOUNT ON;
DECLARE @TaskId bigint = @pTaskId;
DELETE t FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(PK_Tasks)) WHERE t.id = @TaskId;`

// openStageSQL recounts a process's failed tasks and re-derives its stage
// (stageq.OpenStage), after an operator's change to its tasks. In: process id.
const openStageSQL = `
SET NOCOUNT ON;
DECLARE @Pid bigint = @pProcessId;
UPDATE stageq.Processes
   SET failed_tasks = (SELECT COUNT(*) FROM stageq.Tasks AS f WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Failed))
                        WHERE f.process_id = @Pid AND f.state = 'failed')
 WHERE id = @Pid;
EXEC stageq_routines.OpenStage @ProcessId = @Pid;`

// openStage is sqlbase's OpenStage step (base.go).
func (d *SQLServer) openStage(ctx context.Context, q dialect.Querier, id int64) error {
	if _, err := q.ExecContext(ctx, d.calls.SQL(openStageSQL), bigint("pProcessId", id)); err != nil {
		return mapErr(err)
	}
	return nil
}

// processSettingsLocals ends the DECLARE list of a statement that takes a
// process's settings (configure, submit): each setting and its flag, the
// setting turned to NULL ("leave it") when its flag is 0.
const processSettingsLocals = `
        @Priority int = @pPriority,
        @SetPriority bit = @pSetPriority,
        @Weight int = @pWeight,
        @SetWeight bit = @pSetWeight,
        @MaxParallel int = @pMaxParallel,
        @SetMaxParallel bit = @pSetMaxParallel;
IF @SetPriority = 0 SET @Priority = NULL;
IF @SetWeight = 0 SET @Weight = NULL;
IF @SetMaxParallel = 0 SET @MaxParallel = NULL;`

// configureSQL applies new scheduling settings to a locked process
// (stageq.Configure: a new priority reaches the waiting tasks' copy of it, a
// new weight re-spaces their turns; max_parallel 0 removes the cap). Each
// setting changes only when its flag is set. In: process id, then each
// setting and its flag.
const configureSQL = `
SET NOCOUNT ON;
DECLARE @Pid bigint = @pProcessId,` + processSettingsLocals + `
EXEC stageq_routines.Configure @ProcessId = @Pid, @Priority = @Priority, @Weight = @Weight,
     @MaxParallel = @MaxParallel;`

// configure is sqlbase's Configure step (base.go).
func (d *SQLServer) configure(ctx context.Context, q dialect.Querier, id int64, s dialect.ProcessSettings) error {
	_, err := q.ExecContext(ctx, d.calls.SQL(configureSQL), bigint("pProcessId", id),
		integer("pPriority", optInt(s.Priority)), bit("pSetPriority", s.Priority != nil),
		integer("pWeight", optInt(s.Weight)), bit("pSetWeight", s.Weight != nil),
		integer("pMaxParallel", optInt(s.MaxParallel)), bit("pSetMaxParallel", s.MaxParallel != nil))
	if err != nil {
		return mapErr(err)
	}
	return nil
}

// processListSQL reads processes. In: name (empty for all), include finished ones
// (succeeded or cancelled; a named process is always read).
// Out: id, name, state, paused, current order, priority, weight, max_parallel.
const processListSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(400) = @pName,
        @All bit = @pAll,
        @Limit int = @pLimit;
SELECT p.id, p.name, p.state, p.paused, p.current_order, p.priority, p.weight, p.max_parallel
  FROM (` + processPage + `) AS page
  JOIN stageq.Processes AS p ON p.id = page.id
 ORDER BY p.name
OPTION (RECOMPILE);`

// processPage selects the processes a list shows, by name (TOP with ORDER
// BY is allowed in a derived table); the list and its two counts read the
// same ones. Uses @Name, @All and @Limit of the statement around it. The open
// processes are named as IX_Processes_Open's filter names them (the states
// CK_Processes_state leaves), so that under OPTION (RECOMPILE), with the
// variables' values in place, the default list can read that filtered index
// instead of every finished process retention keeps (Microsoft Learn, "Create
// filtered indexes": the query's predicate must imply the filter's, which a
// parameter hides unless the plan is compiled with its value).
const processPage = `
SELECT TOP (@Limit) pp.id FROM stageq.Processes AS pp
 WHERE (@Name = N'' OR pp.name = @Name) AND (@All = 1 OR @Name <> N'' OR pp.state IN ('active', 'failed'))
 ORDER BY pp.name`

// stageCountSQL counts the queued tasks per process, stage and state. In: as
// processListSQL. Out: process id, order, pending, running, failed.
const stageCountSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(400) = @pName,
        @All bit = @pAll,
        @Limit int = @pLimit;
SELECT t.process_id, t.execution_order,
       SUM(CASE WHEN t.state IN ('blocked', 'scheduled', 'available') THEN 1 ELSE 0 END),
       SUM(CASE WHEN t.state = 'running' THEN 1 ELSE 0 END),
       SUM(CASE WHEN t.state = 'failed' THEN 1 ELSE 0 END)
  FROM stageq.Tasks AS t
  JOIN (` + processPage + `) AS p ON p.id = t.process_id
 GROUP BY t.process_id, t.execution_order
OPTION (RECOMPILE);`

// stageDoneSQL counts the tasks that succeeded, from Logs (they left Tasks):
// one succeeded row per task at most (postgres/operate.go says why), so rows
// are counted, not distinct tasks. In: as processListSQL. Out: process id,
// order, done.
const stageDoneSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(400) = @pName,
        @All bit = @pAll,
        @Limit int = @pLimit;
SELECT l.process_id, l.execution_order, COUNT(*)
  FROM stageq.Logs AS l
  JOIN (` + processPage + `) AS p ON p.id = l.process_id
 WHERE l.outcome = 'succeeded'
 GROUP BY l.process_id, l.execution_order
OPTION (RECOMPILE);`

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
