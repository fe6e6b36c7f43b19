-- OpenStage: re-derives which tasks of a process may run: the blocked tasks of its
-- lowest order become available (or scheduled), stamped with virtual times; a stage
-- above a newly arrived lower order, or of a paused process, is blocked again; an
-- empty process ends @EndState ('succeeded' or 'cancelled'), or 'cancelled' when an operator's
-- cancel or discard is its newest Logs row. Final: migration 000008 (ALTER).
CREATE PROCEDURE stageq_routines.OpenStage
    @ProcessId bigint,
    @EndState  varchar(20) = 'succeeded'
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

    DECLARE @Old int, @New int, @Paused bit, @Weight int, @Priority int, @Failed int,
            @State varchar(20), @Finished datetime2(7), @VTail bigint, @NewState varchar(20),
            @Now datetime2(7) = SYSUTCDATETIME(), @Base bigint, @Stride bigint, @Opened bigint = 0,
            @ChunkStart bigint, @ChunkEnd bigint, @Batch int, @Tail bigint,
            @Name nvarchar(200), @Last varchar(20);
    DECLARE @Open TABLE (seq bigint IDENTITY(1, 1) NOT NULL PRIMARY KEY, id bigint NOT NULL);

    IF @EndState IS NULL OR @EndState NOT IN ('succeeded', 'cancelled')
        THROW 50007, N'stageq: @EndState must be succeeded or cancelled', 1;

    -- Already locked by the caller; asking again is free.
    SELECT @Old = p.current_order, @Paused = p.paused, @Weight = p.weight, @Priority = p.priority,
           @Failed = p.failed_tasks, @State = p.state, @Finished = p.finished_at, @VTail = p.vtail,
           @Name = p.name
      FROM stageq.Processes AS p WITH (UPDLOCK, ROWLOCK, INDEX(PK_Processes))
     WHERE p.id = @ProcessId;
    IF @@ROWCOUNT = 0
        RETURN 0;

    -- A locking read even under READ_COMMITTED_SNAPSHOT. Only holders of the
    -- process lock add tasks to a process or move them between stages; a task
    -- being deleted by a completion right now is waited for, so its delete is seen.
    SELECT @New = MIN(t.execution_order)
      FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Stage))
     WHERE t.process_id = @ProcessId;

    IF @New IS NULL
    BEGIN
        -- No task left: done, or cancelled when the removal of the caller (an
        -- operator discarding or cancelling) emptied it, or when an operator's
        -- cancel or discard is the process's newest Logs row, written after its
        -- last attempt started (a cancel that left attempts running, the last of
        -- which has just ended). New tasks make it active again, and their
        -- attempts are newer. A seek on IX_Logs_Process (name, started_at; the
        -- clustered id follows), read backwards. failed_tasks is necessarily 0
        -- (failed tasks stay in the table); resetting it heals any drift.
        SELECT TOP (1) @Last = l.outcome
          FROM stageq.Logs AS l WITH (INDEX(IX_Logs_Process))
         WHERE l.process_name = @Name AND l.process_id = @ProcessId
         ORDER BY l.started_at DESC, l.id DESC;
        UPDATE stageq.Processes
           SET current_order = NULL,
               state = CASE WHEN @Last IN ('cancelled', 'discarded') THEN 'cancelled' ELSE @EndState END,
               failed_tasks = 0, updated_at = @Now, finished_at = @Now
         WHERE id = @ProcessId AND state IN ('active', 'failed');
        RETURN 0;
    END;

    -- Only the open stage can hold available or scheduled tasks.
    IF @Old IS NOT NULL AND (@Paused = 1 OR @New < @Old)
    BEGIN
        WHILE 1 = 1
        BEGIN
            UPDATE TOP (1000) t
               SET state = 'blocked'
              FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(IX_Tasks_Stage))
             WHERE t.process_id = @ProcessId AND t.execution_order = @Old
               AND t.state IN ('available', 'scheduled');
            IF @@ROWCOUNT < 1000
                BREAK;
        END;
    END;

    IF @Paused = 0
    BEGIN
        INSERT INTO @Open (id)
        SELECT b.id
          FROM stageq.Tasks AS b WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Blocked))
         WHERE b.process_id = @ProcessId AND b.execution_order = @New AND b.state = 'blocked'
         ORDER BY b.priority DESC, b.run_at, b.id;
        SET @Opened = @@ROWCOUNT;
        IF @Opened > 0
        BEGIN
            -- Turns start at the current virtual time of the process's priority,
            -- or after its own tasks still stamped ahead of it.
            SET @Stride = 1000000 / @Weight;
            EXEC stageq_routines.VNow @Priority = @Priority, @VNow = @Base OUTPUT;
            IF @VTail > @Base
                SET @Base = @VTail;
            SET @ChunkStart = 0;
            WHILE @ChunkStart < @Opened
            BEGIN
                SET @ChunkEnd = @ChunkStart + 1000;
                UPDATE t
                   SET state = CASE WHEN t.run_at > @Now THEN 'scheduled' ELSE 'available' END,
                       vtime = @Base + (o.seq - 1) * @Stride,
                       process_priority = @Priority
                  FROM stageq.Tasks AS t WITH (ROWLOCK, FORCESEEK)
                  JOIN @Open AS o ON o.id = t.id
                 WHERE o.seq > @ChunkStart AND o.seq <= @ChunkEnd AND t.state = 'blocked';
                SET @ChunkStart = @ChunkEnd;
            END;
            SET @Tail = @Base + @Opened * @Stride;
            EXEC stageq_routines.StampDone @ProcessId = @ProcessId, @VTail = @Tail;
        END;
    END;

    SET @NewState = CASE WHEN @Failed > 0 THEN 'failed' ELSE 'active' END;
    IF @Old IS NULL OR @Old <> @New OR @State <> @NewState OR @Finished IS NOT NULL
        UPDATE stageq.Processes
           SET current_order = @New, state = @NewState, updated_at = @Now, finished_at = NULL
         WHERE id = @ProcessId;
    RETURN 0;
END;
