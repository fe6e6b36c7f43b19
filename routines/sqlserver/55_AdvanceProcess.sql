-- AdvanceProcess: the second half of a completion, run after it committed and
-- outside any transaction: if the process's current stage has no task left,
-- OpenStage re-derives its stage under the process lock. Never waits for a lock
-- (LOCK_TIMEOUT 0): @Busy = 1 when the row is held. Final: migration 000002 (CREATE).
CREATE PROCEDURE stageq_routines.AdvanceProcess
    @ProcessId bigint,
    @Busy      bit = 0 OUTPUT
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

    DECLARE @Lock bigint, @Cur int, @State varchar(20), @Failed int, @Left bit = 0;
    SET @Busy = 0;
    IF @@TRANCOUNT > 0
        THROW 50031, N'stageq: a stage advance runs outside any transaction', 1;
    SET LOCK_TIMEOUT 0;

    BEGIN TRY
        SELECT @Lock = p.id, @Cur = p.current_order, @State = p.state, @Failed = p.failed_tasks
          FROM stageq.Processes AS p WITH (READCOMMITTEDLOCK, INDEX(PK_Processes))
         WHERE p.id = @ProcessId;
    END TRY
    BEGIN CATCH
        IF ERROR_NUMBER() <> 1222 THROW;
        SET @Busy = 1;
        RETURN 0;
    END CATCH;
    IF @Lock IS NULL OR @State NOT IN ('active', 'failed')
        RETURN 0;

    IF @Cur IS NOT NULL AND NOT (@State = 'active' AND @Failed > 0)
    BEGIN
        BEGIN TRY
            IF EXISTS (SELECT 1 FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Stage))
                        WHERE t.process_id = @ProcessId AND t.execution_order = @Cur)
                SET @Left = 1;
        END TRY
        BEGIN CATCH
            IF ERROR_NUMBER() <> 1222 THROW;
            SET @Left = 1; -- held by a claim or an uncommitted completion: see above
        END CATCH;
        IF @Left = 1
            RETURN 0;
    END;

    BEGIN TRY
        BEGIN TRANSACTION;
        SET @Lock = NULL;
        SELECT @Lock = p.id
          FROM stageq.Processes AS p WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK, INDEX(PK_Processes))
         WHERE p.id = @ProcessId;
        IF @Lock IS NULL
            SET @Busy = 1;
        ELSE
            EXEC stageq_routines.OpenStage @ProcessId = @ProcessId;
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
        IF ERROR_NUMBER() <> 1222 THROW;
        SET @Busy = 1; -- a row the stage needs is held for now
    END CATCH;
    RETURN 0;
END;
