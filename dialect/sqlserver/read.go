package sqlserver

// Reads for operators (queuectl, tests), run by sqlbase (base.go). They take no locks beyond the default
// READ COMMITTED reads: on a database with READ_COMMITTED_SNAPSHOT on they read
// row versions and block nobody. Their filters are optional, so each statement
// ends with OPTION (RECOMPILE): the plan is built for the filters actually given
// (a seek on the right index) and is not cached, so these few statements add
// nothing to the plan cache either.

// logListSQL reads Logs oldest first, logListNewestSQL the newest rows of the
// filter (sqlbase turns them oldest first). In: process name, task id, worker
// id, outcome (empty or 0: no filter), started at or after, row limit, the id
// to page after among rows started at that very time (0: none), and process
// id (0: any). A process by name seeks IX_Logs_Process (process_name,
// started_at); Logs here has no index on process ids. Out: log rows.
const (
	logListSQL       = logListFrom + ` ORDER BY l.started_at, l.id OPTION (RECOMPILE);`
	logListNewestSQL = logListFrom + ` ORDER BY l.started_at DESC, l.id DESC OPTION (RECOMPILE);`
)

const logListFrom = `
SET NOCOUNT ON;
DECLARE @Process nvarchar(400) = @pProcess,
        @TaskId bigint = @pTaskId,
        @WorkerId nvarchar(400) = @pWorkerId,
        @Outcome varchar(20) = @pOutcome,
        @Since datetime2(7) = @pSince,
        @Limit int = @pLimit,
        @AfterId bigint = @pAfterId,
        @ProcessId bigint = @pProcessId;
SELECT TOP (@Limit) l.id, l.task_id, l.process_id, l.process_name, l.execution_order, l.kind, l.body,
       l.worker_id, l.attempt, l.started_at, l.ended_at, l.outcome, COALESCE(l.error, N''), l.retry_at,
       COALESCE(l.schedule_name, N'')
  FROM stageq.Logs AS l
 WHERE (@Process = N'' OR l.process_name = @Process)
   AND (@TaskId = 0 OR l.task_id = @TaskId)
   AND (@WorkerId = N'' OR l.worker_id = @WorkerId)
   AND (@Outcome = '' OR l.outcome = @Outcome)
   AND l.started_at >= @Since AND (l.started_at > @Since OR l.id > @AfterId)
   AND (@ProcessId = 0 OR l.process_id = @ProcessId)`

// taskListSQL reads the tasks still queued. In: process name, state (empty for
// all), row limit, kind (empty for all). Out: tasks by process, order and id.
const taskListSQL = `
SET NOCOUNT ON;
DECLARE @Process nvarchar(400) = @pProcess,
        @State varchar(20) = @pState,
        @Limit int = @pLimit,
        @Kind nvarchar(400) = @pKind;
SELECT TOP (@Limit) t.id, t.process_name, t.execution_order, t.kind, t.body, t.state, t.attempt,
       t.max_attempts, t.priority, t.run_at, COALESCE(t.worker_id, N''), COALESCE(t.last_error, N''), t.abandons
  FROM stageq.Tasks AS t
 WHERE (@Process = N'' OR t.process_name = @Process)
   AND (@State = '' OR t.state = @State)
   AND (@Kind = N'' OR t.kind = @Kind)
 ORDER BY t.process_name, t.execution_order, t.id
OPTION (RECOMPILE);`

// processGetSQL reads one process. In: name. Out: id, name, state, current order.
// A seek on UQ_Processes_name.
const processGetSQL = `
SET NOCOUNT ON;
DECLARE @Name nvarchar(400) = @pName;
SELECT p.id, p.name, p.state, p.current_order FROM stageq.Processes AS p WHERE p.name = @Name;`
