-- Configure: changes a process's scheduling (@Priority, @Weight, @MaxParallel;
-- NULL keeps, @MaxParallel 0 removes the cap); the caller holds its row. A new
-- priority reaches the waiting tasks, a new weight re-spaces the stamped turns.
-- Final definition: migration 000002 (CREATE).
CREATE PROCEDURE stageq_routines.Configure
    @ProcessId   bigint,
    @Priority    int = NULL,
    @Weight      int = NULL,
    @MaxParallel int = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

    DECLARE @OldPriority int, @OldWeight int, @NewPriority int, @NewWeight int, @Cur int,
            @Base bigint, @Stride bigint, @Stamped bigint, @ChunkStart bigint, @ChunkEnd bigint,
            @Tail bigint;
    DECLARE @Stamp TABLE (seq bigint IDENTITY(1, 1) NOT NULL PRIMARY KEY, id bigint NOT NULL);

    SELECT @OldPriority = p.priority, @OldWeight = p.weight, @Cur = p.current_order
      FROM stageq.Processes AS p WITH (UPDLOCK, ROWLOCK, INDEX(PK_Processes))
     WHERE p.id = @ProcessId;
    IF @@ROWCOUNT = 0
        RETURN 0;
    SET @NewPriority = COALESCE(@Priority, @OldPriority);
    SET @NewWeight = COALESCE(@Weight, @OldWeight);

    UPDATE stageq.Processes
       SET priority = @NewPriority, weight = @NewWeight,
           max_parallel = CASE WHEN @MaxParallel IS NULL THEN max_parallel
                               WHEN @MaxParallel = 0 THEN NULL ELSE @MaxParallel END,
           updated_at = SYSUTCDATETIME()
     WHERE id = @ProcessId;

    IF @NewPriority <> @OldPriority
    BEGIN
        WHILE 1 = 1
        BEGIN
            UPDATE TOP (1000) t
               SET process_priority = @NewPriority
              FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(IX_Tasks_Stage))
             WHERE t.process_id = @ProcessId AND t.process_priority <> @NewPriority;
            IF @@ROWCOUNT < 1000
                BREAK;
        END;
    END;

    IF @NewWeight <> @OldWeight AND @Cur IS NOT NULL
    BEGIN
        -- Only the open stage holds stamped (available or scheduled) tasks.
        INSERT INTO @Stamp (id)
        SELECT t.id
          FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Stage))
         WHERE t.process_id = @ProcessId AND t.execution_order = @Cur
           AND t.state IN ('available', 'scheduled')
         ORDER BY t.vtime, t.id;
        SET @Stamped = @@ROWCOUNT;
        IF @Stamped > 0
        BEGIN
            SELECT @Base = MIN(t.vtime)
              FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Stage))
             WHERE t.process_id = @ProcessId AND t.execution_order = @Cur
               AND t.state IN ('available', 'scheduled');
            SET @Stride = 1000000 / @NewWeight;
            SET @ChunkStart = 0;
            WHILE @ChunkStart < @Stamped
            BEGIN
                SET @ChunkEnd = @ChunkStart + 1000;
                UPDATE t
                   SET vtime = @Base + (s.seq - 1) * @Stride
                  FROM stageq.Tasks AS t WITH (ROWLOCK, FORCESEEK)
                  JOIN @Stamp AS s ON s.id = t.id
                 WHERE s.seq > @ChunkStart AND s.seq <= @ChunkEnd;
                SET @ChunkStart = @ChunkEnd;
            END;
            SET @Tail = @Base + @Stamped * @Stride;
            UPDATE stageq.Processes SET vtail = @Tail WHERE id = @ProcessId;
        END;
    END;
    RETURN 0;
END;
