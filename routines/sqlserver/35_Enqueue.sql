-- Enqueue: the SQL API for one task: the same validation as Submit, and the task
-- commits with the caller's transaction. Returns the new task's id in @TaskId and
-- as a one-row result set (task_id). Users call it through the public wrapper
-- (public/Enqueue.sql). Final definition: migration 000001 (CREATE).
CREATE PROCEDURE stageq_routines.Enqueue
    @Body           nvarchar(max),
    @ExecutionOrder int = 0,
    @Process        nvarchar(400) = N'default',
    @MaxAttempts    int = 3,
    @Priority       int = 0,
    @RunAt          datetimeoffset(7) = NULL,
    @Atomic         bit = 0,
    @Kind           nvarchar(400) = N'sql',
    @LimitKey       nvarchar(400) = NULL,
    @TaskId         bigint = NULL OUTPUT
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;

    -- A NULL argument leaves its property out; Submit then names what is missing.
    DECLARE @Tasks nvarchar(max) = (
        SELECT @ExecutionOrder AS execution_order, @Kind AS kind, @Body AS body,
               @MaxAttempts AS max_attempts, @Priority AS priority, @Atomic AS atomic,
               @RunAt AS run_at, @LimitKey AS limit_key
        FOR JSON PATH);

    EXEC stageq_routines.Submit @Process = @Process, @Tasks = @Tasks, @TaskId = @TaskId OUTPUT, @ResultSet = 0;
    SELECT @TaskId AS task_id;
    RETURN 0;
END;
