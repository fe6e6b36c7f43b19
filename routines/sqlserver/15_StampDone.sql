-- StampDone: records that a process's tasks were stamped up to @VTail: raises
-- its vtail, and the clock (sequence stageq.VClock, via sys.sp_sequence_get_range)
-- so that it is never behind the newest stamp. The caller holds the process row.
-- Final definition: migration 000002 (CREATE).
CREATE PROCEDURE stageq_routines.StampDone
    @ProcessId bigint,
    @VTail     bigint
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @Clock bigint, @Size bigint, @First sql_variant;
    UPDATE stageq.Processes
       SET vtail = CASE WHEN vtail > @VTail THEN vtail ELSE @VTail END
     WHERE id = @ProcessId;
    SET @Clock = NEXT VALUE FOR stageq.VClock;
    IF @VTail > @Clock
    BEGIN
        SET @Size = @VTail - @Clock;
        EXEC sys.sp_sequence_get_range @sequence_name = N'stageq.VClock', @range_size = @Size,
             @range_first_value = @First OUTPUT;
    END;
    RETURN 0;
END;
