-- Advance: runs AdvanceProcess for each process id of @Ids (a JSON array of
-- numbers), in id order, and returns the ids whose row another transaction held
-- (one column, id), to try again shortly. Final definition: migration 000002 (CREATE).
CREATE PROCEDURE stageq_routines.Advance
    @Ids nvarchar(max)
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;

    DECLARE @Pid bigint = 0, @Busy bit;
    DECLARE @Todo TABLE (id bigint NOT NULL PRIMARY KEY);
    DECLARE @Waiting TABLE (id bigint NOT NULL PRIMARY KEY);

    IF @Ids IS NULL OR ISJSON(@Ids) <> 1
        THROW 50004, N'stageq: process ids must be a JSON array of numbers', 1;
    INSERT INTO @Todo (id)
    SELECT DISTINCT TRY_CONVERT(bigint, j.[value])
      FROM OPENJSON(@Ids) AS j
     WHERE TRY_CONVERT(bigint, j.[value]) IS NOT NULL;

    WHILE 1 = 1
    BEGIN
        SELECT TOP (1) @Pid = d.id FROM @Todo AS d WHERE d.id > @Pid ORDER BY d.id;
        IF @@ROWCOUNT = 0
            BREAK;
        SET @Busy = 0;
        EXEC stageq_routines.AdvanceProcess @ProcessId = @Pid, @Busy = @Busy OUTPUT;
        IF @Busy = 1
            INSERT INTO @Waiting (id) VALUES (@Pid);
    END;

    SELECT w.id FROM @Waiting AS w ORDER BY w.id;
    RETURN 0;
END;
