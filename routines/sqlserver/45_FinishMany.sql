-- FinishMany: ends many attempts (@Results, a JSON array, at most 1,000) in one
-- transaction, each fenced by its lease token; outcomes succeeded, failed,
-- released, abandoned (abandon budget 10). Returns the attempts recorded and the
-- processes to pass to Advance. Final definition: migration 000009 (ALTER).
CREATE PROCEDURE stageq_routines.FinishMany
    @Results   nvarchar(max),
    @ResultSet bit = 1,
    @Held      int = 0 OUTPUT
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

    DECLARE @Now datetime2(7), @Pid bigint, @Cur int, @N int;
    -- The abandon budget (PostgreSQL: stageq.max_abandons()); stageq_routines.Rescue has the same.
    DECLARE @MaxAbandons int = 10;
    DECLARE @R TABLE (
        seq int NOT NULL PRIMARY KEY, id bigint NULL, token bigint NULL, outcome varchar(20) NULL,
        error nvarchar(max) NULL, retry_ms bigint NULL);
    DECLARE @Ended TABLE (
        id bigint NOT NULL PRIMARY KEY, process_id bigint NOT NULL, execution_order int NOT NULL,
        final bit NOT NULL DEFAULT (0), retry_at datetime2(7) NULL,
        err nvarchar(max) NULL); -- the error an abandoned attempt records
    DECLARE @Handed TABLE (id bigint NOT NULL PRIMARY KEY); -- processes of hand-backs and final failures
    DECLARE @Advance TABLE (id bigint NOT NULL PRIMARY KEY);

    SET @Held = 0;
    IF @Results IS NULL OR ISJSON(@Results) <> 1
        THROW 50004, N'stageq: finish results must be a JSON array', 1;
    INSERT INTO @R (seq, id, token, outcome, error, retry_ms)
    SELECT CONVERT(int, e.[key]) + 1, j.id, j.token, j.outcome, NULLIF(j.error, N''), COALESCE(j.retry_ms, 0)
      FROM OPENJSON(@Results) AS e
     CROSS APPLY OPENJSON(e.[value]) WITH (
           id       bigint        '$.id',
           token    bigint        '$.token',
           outcome  varchar(20)   '$.outcome',
           error    nvarchar(max) '$.error',
           retry_ms bigint        '$.retry_ms') AS j;
    IF (SELECT COUNT(*) FROM @R) > 1000
        THROW 50004, N'stageq: at most 1000 results per call', 1;
    IF EXISTS (SELECT 1 FROM @R AS r
                WHERE r.id IS NULL OR r.token IS NULL OR r.outcome IS NULL
                   OR r.outcome NOT IN ('succeeded', 'failed', 'released', 'abandoned'))
        THROW 50004, N'stageq: each result needs an id, a token and an outcome of succeeded, failed, released or abandoned', 1;
    IF EXISTS (SELECT 1 FROM @R AS r WHERE r.retry_ms < 0 OR r.retry_ms > 315360000000)
        THROW 50004, N'stageq: retry delay must be from 0 to 315360000000 ms (ten years)', 1;
    IF EXISTS (SELECT 1 FROM @R AS r GROUP BY r.id HAVING COUNT(*) > 1)
        THROW 50004, N'stageq: a task appears twice in one batch of results', 1;

    BEGIN TRY
        BEGIN TRANSACTION;

        IF EXISTS (SELECT 1 FROM @R AS r WHERE r.outcome <> 'succeeded')
        BEGIN
            INSERT INTO @Handed (id)
            SELECT DISTINCT t.process_id
              FROM @R AS r
              JOIN stageq.Tasks AS t WITH (READCOMMITTEDLOCK, FORCESEEK) ON t.id = r.id
             WHERE r.outcome <> 'succeeded' AND t.lease_token = r.token AND t.state = 'running';
            SET @Pid = 0;
            WHILE 1 = 1
            BEGIN
                SELECT TOP (1) @Pid = h.id FROM @Handed AS h WHERE h.id > @Pid ORDER BY h.id;
                IF @@ROWCOUNT = 0
                    BREAK;
                SELECT @Cur = p.current_order
                  FROM stageq.Processes AS p WITH (UPDLOCK, ROWLOCK, INDEX(PK_Processes))
                 WHERE p.id = @Pid;
            END;
        END;

        SET @Now = SYSUTCDATETIME();

        DELETE t
        OUTPUT deleted.id, deleted.process_id, deleted.execution_order
          INTO @Ended (id, process_id, execution_order)
          FROM stageq.Tasks AS t WITH (ROWLOCK, FORCESEEK)
          JOIN @R AS r ON r.id = t.id
         WHERE r.outcome = 'succeeded' AND t.lease_token = r.token AND t.state = 'running';

        IF EXISTS (SELECT 1 FROM @Handed)
            UPDATE t
               SET state = CASE WHEN r.outcome = 'failed' AND r.retry_ms <= 0 THEN 'failed'
                                WHEN r.outcome = 'abandoned' AND t.abandons + 1 >= @MaxAbandons THEN 'failed'
                                WHEN p.current_order IS NULL OR t.execution_order <> p.current_order
                                     OR p.paused = 1 THEN 'blocked'
                                WHEN r.outcome = 'failed' THEN 'scheduled'
                                ELSE 'available' END,
                   attempt = CASE WHEN r.outcome = 'released' THEN t.attempt - 1 ELSE t.attempt END,
                   abandons = CASE WHEN r.outcome = 'abandoned' THEN t.abandons + 1 ELSE t.abandons END,
                   run_at = CASE WHEN r.outcome IN ('released', 'abandoned') THEN @Now
                                 WHEN r.outcome = 'failed' AND r.retry_ms > 0
                                 THEN DATEADD(millisecond, CONVERT(int, r.retry_ms % 1000),
                                              DATEADD(second, CONVERT(int, r.retry_ms / 1000), @Now))
                                 ELSE t.run_at END,
                   last_error = CASE WHEN r.outcome = 'failed' THEN r.error
                                     WHEN r.outcome = 'abandoned' AND t.abandons + 1 >= @MaxAbandons
                                     THEN CONCAT(COALESCE(r.error, N'abandoned'), N'; abandoned ', t.abandons + 1,
                                                 N' times (its worker died or lost its database connection each time): failed for good')
                                     WHEN r.outcome = 'abandoned'
                                     THEN CONCAT(COALESCE(r.error, N'abandoned'), N' (abandoned ', t.abandons + 1,
                                                 N' of ', @MaxAbandons, N' times; not counted against max_attempts)')
                                     ELSE t.last_error END,
                   worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
            OUTPUT inserted.id, inserted.process_id, inserted.execution_order,
                   CASE WHEN inserted.state = 'failed' THEN 1 ELSE 0 END,
                   CASE WHEN r.outcome = 'failed' AND r.retry_ms > 0 THEN inserted.run_at END,
                   CASE WHEN r.outcome = 'abandoned' THEN inserted.last_error END
              INTO @Ended (id, process_id, execution_order, final, retry_at, err)
              FROM stageq.Tasks AS t WITH (ROWLOCK, FORCESEEK)
              JOIN @R AS r ON r.id = t.id
              JOIN stageq.Processes AS p WITH (READCOMMITTEDLOCK, INDEX(PK_Processes)) ON p.id = t.process_id
             WHERE r.outcome <> 'succeeded' AND t.lease_token = r.token AND t.state = 'running';

        SET @N = (SELECT COUNT(*) FROM @Ended);
        IF @N > 0
        BEGIN
            UPDATE l
               SET ended_at = @Now, duration_ms = DATEDIFF_BIG(millisecond, l.started_at, @Now),
                   outcome = r.outcome, error = COALESCE(e.err, r.error), retry_at = e.retry_at
              FROM stageq.Logs AS l WITH (ROWLOCK, INDEX(IX_Logs_Task))
              JOIN @Ended AS e ON e.id = l.task_id
              JOIN @R AS r ON r.id = e.id
             WHERE l.lease_token = r.token;

            IF EXISTS (SELECT 1 FROM @Ended AS e WHERE e.final = 1)
                UPDATE p
                   SET failed_tasks = p.failed_tasks + f.n,
                       state = CASE WHEN p.state = 'active' THEN 'failed' ELSE p.state END,
                       updated_at = @Now
                  FROM stageq.Processes AS p WITH (ROWLOCK, INDEX(PK_Processes))
                  JOIN (SELECT e.process_id, COUNT(*) AS n FROM @Ended AS e WHERE e.final = 1
                         GROUP BY e.process_id) AS f ON f.process_id = p.id;

            -- A stage may have ended when none of its tasks is left waiting: the
            -- ones still there are all running (perhaps finishing elsewhere now).
            -- A process row held elsewhere reads as "may have ended".
            INSERT INTO @Advance (id)
            SELECT DISTINCT e.process_id
              FROM @Ended AS e
              LEFT JOIN stageq.Processes AS p WITH (READPAST, READCOMMITTEDLOCK, INDEX(PK_Processes)) ON p.id = e.process_id
             WHERE (p.id IS NULL OR p.current_order = e.execution_order)
               AND NOT EXISTS (SELECT 1 FROM stageq.Tasks AS s WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Tasks_Stage))
                                WHERE s.process_id = e.process_id AND s.execution_order = e.execution_order
                                  AND s.state <> 'running');
        END;

        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
        THROW;
    END CATCH;

    SET @Held = @N;
    IF @ResultSet = 1
        SELECT e.id AS task_id, CONVERT(bigint, NULL) AS advance_process_id FROM @Ended AS e
        UNION ALL
        SELECT NULL, a.id FROM @Advance AS a;
    RETURN 0;
END;
