-- BodySession: the worker's first statement on a body's connection: checks the
-- attempt still runs under @Token, tags the session (CONTEXT_INFO) and records
-- @@SPID in the attempt's Logs row; @Running = 0 means do not start the body.
-- Final definition: migration 000010 (CREATE).
CREATE PROCEDURE stageq_routines.BodySession
    @TaskId  bigint,
    @Token   bigint,
    @Running bit = 0 OUTPUT
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

    DECLARE @Tag varbinary(128);
    SET @Running = 0;
    IF @TaskId IS NULL OR @Token IS NULL
        RETURN 0;
    IF NOT EXISTS (SELECT 1 FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(PK_Tasks))
                    WHERE t.id = @TaskId AND t.lease_token = @Token AND t.state = 'running')
        RETURN 0;

    -- Tagged before the session id is recorded: a rescue that finds the id finds
    -- the tag too. SET CONTEXT_INFO takes a constant or a variable only.
    SET @Tag = CONVERT(varbinary(6), 'stageq') + CONVERT(binary(8), @TaskId) + CONVERT(binary(8), @Token);
    SET CONTEXT_INFO @Tag;

    UPDATE l
       SET [session] = @@SPID
      FROM stageq.Logs AS l WITH (ROWLOCK, INDEX(IX_Logs_Task))
     WHERE l.task_id = @TaskId AND l.lease_token = @Token AND l.outcome = 'running';
    IF @@ROWCOUNT > 0
        SET @Running = 1;
    ELSE
        SET CONTEXT_INFO 0x;
    RETURN 0;
END;
