-- stageq.Enqueue, the public SQL API for one task (users' own SQL calls it:
-- EXEC stageq.Enqueue @Body = N'EXEC etl.Load', @ExecutionOrder = 200, ...).
-- It only forwards to the current routine set's Enqueue, with the same parameters,
-- result set (task_id), OUTPUT @TaskId and return code. CREATE OR ALTER keeps its
-- permissions (Microsoft's documentation; not run on a SQL Server here).
CREATE OR ALTER PROCEDURE stageq.Enqueue
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
    DECLARE @Return int;
    EXEC @Return = stageq_routines.Enqueue
         @Body           = @Body,
         @ExecutionOrder = @ExecutionOrder,
         @Process        = @Process,
         @MaxAttempts    = @MaxAttempts,
         @Priority       = @Priority,
         @RunAt          = @RunAt,
         @Atomic         = @Atomic,
         @Kind           = @Kind,
         @LimitKey       = @LimitKey,
         @TaskId         = @TaskId OUTPUT;
    RETURN @Return;
END;
