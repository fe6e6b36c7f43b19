-- Submit: inserts a batch of tasks (@Tasks, a JSON array of task objects) into one
-- process, in the caller's transaction when there is one; every task arrives
-- blocked and OpenStage opens the lowest stage. Returns (process_id, task_id) rows
-- unless @ResultSet = 0. Final definition: migration 000002 (ALTER).
CREATE PROCEDURE stageq_routines.Submit
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
    SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

    DECLARE @Name nvarchar(200), @Bad int, @ProcPriority int,
            @Problem nvarchar(400), @Msg nvarchar(2048), @Now datetime2(7) = SYSUTCDATETIME(),
            @ChunkStart int, @ChunkEnd int, @Last int;
    DECLARE @Raw TABLE (
        ord int NOT NULL PRIMARY KEY, order_type int NULL, execution_order nvarchar(max) NULL,
        kind nvarchar(max) NULL, body nvarchar(max) NULL, max_attempts nvarchar(max) NULL,
        priority nvarchar(max) NULL, atomic nvarchar(max) NULL, run_at nvarchar(max) NULL,
        delay_ms nvarchar(max) NULL, limit_key nvarchar(max) NULL);
    DECLARE @Ids TABLE (id bigint NOT NULL PRIMARY KEY);

    SET @ProcessId = NULL;
    SET @TaskId = NULL;

    -- Validation first, before any lock is taken. The parameter is nvarchar(400) so
    -- that a name longer than the column is reported, never silently cut.
    IF @Process IS NULL OR DATALENGTH(@Process) = 0
        THROW 50001, N'stageq: process name must not be empty', 1;
    IF DATALENGTH(@Process) > 400
        THROW 50001, N'stageq: process name is longer than 200 characters', 1;
    IF @Weight IS NOT NULL AND (@Weight < 1 OR @Weight > 1000)
        THROW 50001, N'stageq: weight must be between 1 and 1000', 1;
    IF @MaxParallel IS NOT NULL AND @MaxParallel < 0
        THROW 50001, N'stageq: max_parallel must be >= 1 (or 0 for no cap)', 1;
    SET @Name = @Process;

    IF @Tasks IS NULL OR ISJSON(@Tasks) <> 1
        THROW 50002, N'stageq: tasks must be a JSON array of task objects', 1;
    -- OPENJSON over an array yields keys 0..n-1, and type 5 for objects.
    IF EXISTS (SELECT 1 FROM OPENJSON(@Tasks) AS e WHERE e.[type] <> 5 OR TRY_CONVERT(int, e.[key]) IS NULL)
        THROW 50002, N'stageq: tasks must be a JSON array of task objects', 1;
    IF NOT EXISTS (SELECT 1 FROM OPENJSON(@Tasks))
        THROW 50002, N'stageq: a submission needs at least one task', 1;

    INSERT INTO @Raw (ord, order_type, execution_order, kind, body, max_attempts, priority, atomic,
                      run_at, delay_ms, limit_key)
    SELECT CONVERT(int, e.[key]) + 1,
           (SELECT p.[type] FROM OPENJSON(e.[value]) AS p WHERE p.[key] = N'execution_order'),
           j.execution_order, j.kind, j.body, j.max_attempts, j.priority, j.atomic, j.run_at,
           j.delay_ms, j.limit_key
      FROM OPENJSON(@Tasks) AS e
     CROSS APPLY OPENJSON(e.[value]) WITH (
           execution_order nvarchar(max) '$.execution_order',
           kind            nvarchar(max) '$.kind',
           body            nvarchar(max) '$.body',
           max_attempts    nvarchar(max) '$.max_attempts',
           priority        nvarchar(max) '$.priority',
           atomic          nvarchar(max) '$.atomic',
           run_at          nvarchar(max) '$.run_at',
           delay_ms        nvarchar(max) '$.delay_ms',
           limit_key       nvarchar(max) '$.limit_key') AS j;

    SELECT TOP (1) @Bad = r.ord, @Problem = c.problem
      FROM @Raw AS r
     CROSS APPLY (SELECT CASE
           WHEN r.order_type IS NULL OR r.order_type <> 2
                OR TRY_CONVERT(int, r.execution_order) IS NULL OR TRY_CONVERT(int, r.execution_order) < 0
               THEN N'execution_order must be a whole number from 0 to 2147483647'
           WHEN r.body IS NULL OR DATALENGTH(r.body) = 0
               THEN N'body must not be empty'
           WHEN r.kind IS NOT NULL AND (DATALENGTH(r.kind) = 0 OR DATALENGTH(r.kind) > 400)
               THEN N'kind must be 1 to 200 characters'
           WHEN r.max_attempts IS NOT NULL AND (TRY_CONVERT(int, r.max_attempts) IS NULL OR TRY_CONVERT(int, r.max_attempts) < 1)
               THEN N'max_attempts must be a whole number >= 1'
           WHEN r.priority IS NOT NULL AND TRY_CONVERT(int, r.priority) IS NULL
               THEN N'priority must be a whole number'
           WHEN r.atomic IS NOT NULL AND r.atomic NOT IN (N'true', N'false')
               THEN N'atomic must be true or false'
           WHEN r.run_at IS NOT NULL AND TRY_CONVERT(datetimeoffset(7), r.run_at) IS NULL
               THEN N'run_at must be an ISO 8601 time such as 2024-05-01T10:00:00Z'
           WHEN r.delay_ms IS NOT NULL AND (TRY_CONVERT(bigint, r.delay_ms) IS NULL
                OR TRY_CONVERT(bigint, r.delay_ms) < 0 OR TRY_CONVERT(bigint, r.delay_ms) > 315360000000)
               THEN N'delay_ms must be a whole number from 0 to 315360000000 (ten years)'
           WHEN r.limit_key IS NOT NULL AND (DATALENGTH(r.limit_key) = 0 OR DATALENGTH(r.limit_key) > 400)
               THEN N'limit_key must be 1 to 200 characters'
           END AS problem) AS c
     WHERE c.problem IS NOT NULL
     ORDER BY r.ord;
    IF @Bad IS NOT NULL
    BEGIN
        -- No user text goes into the message, so nothing needs escaping for THROW.
        SET @Msg = CONCAT(N'stageq: task ', @Bad, N' is invalid: ', @Problem);
        THROW 50003, @Msg, 1;
    END;

    BEGIN TRY
        BEGIN TRANSACTION;

        -- The process row's update lock serialises every change of a process: it is
        -- the first lock every writer of a process takes. HOLDLOCK turns the lookup
        -- of a missing name into a key-range lock, so two submissions creating the
        -- same process queue up instead of both inserting it.
        SELECT @ProcessId = p.id, @Name = p.name
          FROM stageq.Processes AS p WITH (UPDLOCK, HOLDLOCK, ROWLOCK, INDEX(UQ_Processes_name))
         WHERE p.name = @Process;
        IF @ProcessId IS NULL
        BEGIN
            INSERT INTO stageq.Processes (name) VALUES (@Name);
            SET @ProcessId = CONVERT(bigint, SCOPE_IDENTITY());
        END;

        IF @Priority IS NOT NULL OR @Weight IS NOT NULL OR @MaxParallel IS NOT NULL
            EXEC stageq_routines.Configure @ProcessId = @ProcessId, @Priority = @Priority, @Weight = @Weight,
                 @MaxParallel = @MaxParallel;
        SELECT @ProcPriority = p.priority
          FROM stageq.Processes AS p WITH (UPDLOCK, ROWLOCK, INDEX(PK_Processes))
         WHERE p.id = @ProcessId;

        -- Every task arrives blocked; OpenStage then opens the lowest stage,
        -- stamping its tasks' turns (virtual times) in their priority order, and
        -- blocks again a started stage above a new lower one.
        -- Inserted 1,000 at a time (r.ord is 1..n): Microsoft's documentation says
        -- SQL Server tries to escalate to a table lock, which every claim's READPAST
        -- would wait for, once one statement holds 5,000 locks on one index (not
        -- seen here). All chunks are one transaction.
        SELECT @Last = MAX(r.ord) FROM @Raw AS r;
        SET @ChunkStart = 1;
        WHILE @ChunkStart <= @Last
        BEGIN
            SET @ChunkEnd = @ChunkStart + 999;
            INSERT INTO stageq.Tasks (process_id, process_name, execution_order, kind, body, state,
                                      priority, max_attempts, atomic, run_at, limit_key, process_priority)
            OUTPUT inserted.id INTO @Ids (id)
            SELECT @ProcessId, @Name, o.execution_order, COALESCE(r.kind, N'sql'), r.body,
                   'blocked',
                   COALESCE(TRY_CONVERT(int, r.priority), 0),
                   COALESCE(TRY_CONVERT(int, r.max_attempts), 3),
                   CASE WHEN r.atomic = N'true' THEN 1 ELSE 0 END,
                   COALESCE(CONVERT(datetime2(7), SWITCHOFFSET(TRY_CONVERT(datetimeoffset(7), r.run_at), '+00:00')),
                            DATEADD(millisecond, CONVERT(int, COALESCE(TRY_CONVERT(bigint, r.delay_ms), 0) % 1000),
                                    DATEADD(second, CONVERT(int, COALESCE(TRY_CONVERT(bigint, r.delay_ms), 0) / 1000), @Now))),
                   r.limit_key, @ProcPriority
              FROM @Raw AS r
             CROSS APPLY (SELECT TRY_CONVERT(int, r.execution_order) AS execution_order) AS o
             WHERE r.ord >= @ChunkStart AND r.ord <= @ChunkEnd
             ORDER BY r.ord;
            SET @ChunkStart = @ChunkEnd + 1;
        END;

        EXEC stageq_routines.OpenStage @ProcessId = @ProcessId;

        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
        THROW;
    END CATCH;

    SELECT @TaskId = MAX(i.id) FROM @Ids AS i;
    IF @ResultSet = 1
        SELECT @ProcessId AS process_id, i.id AS task_id FROM @Ids AS i ORDER BY i.id;
    RETURN 0;
END;
