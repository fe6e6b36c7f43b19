-- stageq.Submit, the public SQL API for a batch of tasks into one process (users'
-- own SQL calls it; the Go dialect calls its own version's Submit). It only
-- forwards to the current routine set's Submit, with the same parameters, result
-- set (process_id, task_id unless @ResultSet = 0), OUTPUT parameters and return
-- code. CREATE OR ALTER keeps its permissions (Microsoft's documentation; not
-- run on a SQL Server here).
CREATE OR ALTER PROCEDURE stageq.Submit
    @Process     nvarchar(400),
    @Tasks       nvarchar(max),
    @Priority    int = NULL,
    @Weight      int = NULL,
    @MaxParallel int = NULL,
    @ProcessId   bigint = NULL OUTPUT,
    @TaskId      bigint = NULL OUTPUT,
    @ResultSet   bit = 1
AS
BEGIN
    SET NOCOUNT ON;
    DECLARE @Return int;
    EXEC @Return = stageq_routines.Submit
         @Process     = @Process,
         @Tasks       = @Tasks,
         @Priority    = @Priority,
         @Weight      = @Weight,
         @MaxParallel = @MaxParallel,
         @ProcessId   = @ProcessId OUTPUT,
         @TaskId      = @TaskId OUTPUT,
         @ResultSet   = @ResultSet;
    RETURN @Return;
END;
