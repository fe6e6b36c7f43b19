-- VNow: the current virtual time of priority @Priority (OUTPUT @VNow): the
-- virtual time of the next task a claim would take at that priority, read with
-- READPAST, or else the clock (NEXT VALUE FOR stageq.VClock, which moves it on by one).
-- Final definition: migration 000002 (CREATE).
CREATE PROCEDURE stageq_routines.VNow
    @Priority int,
    @VNow     bigint = NULL OUTPUT
AS
BEGIN
    SET NOCOUNT ON;
    SET @VNow = NULL;
    SELECT TOP (1) @VNow = h.vtime
      FROM stageq.Tasks AS h WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Tasks_Claim))
     WHERE h.state = 'available' AND h.process_priority = @Priority
     ORDER BY h.process_priority DESC, h.vtime, h.id;
    IF @VNow IS NULL
        SET @VNow = NEXT VALUE FOR stageq.VClock;
    RETURN 0;
END;
