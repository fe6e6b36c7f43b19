-- Finish: ends one attempt through FinishMany, in the caller's transaction when
-- there is one. @Held = 0, with nothing changed, when the token no longer holds
-- the task; the caller then passes the process to Advance once it committed.
-- Final definition: migration 000009 (ALTER).
CREATE PROCEDURE stageq_routines.Finish
    @TaskId  bigint,
    @Token   bigint,
    @Outcome varchar(20),
    @Error   nvarchar(max) = NULL,
    @RetryMs bigint = NULL,
    @Held    bit = 0 OUTPUT
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

    DECLARE @Results nvarchar(max), @Count int = 0;
    SET @Held = 0;
    IF @Outcome IS NULL OR @Outcome NOT IN ('succeeded', 'failed', 'released', 'abandoned')
        THROW 50004, N'stageq: finish outcome must be succeeded, failed, released or abandoned', 1;
    IF @RetryMs IS NOT NULL AND (@RetryMs < 0 OR @RetryMs > 315360000000)
        THROW 50004, N'stageq: retry delay must be from 0 to 315360000000 ms (ten years)', 1;
    IF @TaskId IS NULL OR @Token IS NULL
        RETURN 0;

    SET @Results = (SELECT @TaskId AS id, @Token AS token, @Outcome AS outcome, @Error AS error,
                           COALESCE(@RetryMs, 0) AS retry_ms
                    FOR JSON PATH);
    EXEC stageq_routines.FinishMany @Results = @Results, @ResultSet = 0, @Held = @Count OUTPUT;
    SET @Held = CASE WHEN @Count > 0 THEN 1 ELSE 0 END;
    RETURN 0;
END;
