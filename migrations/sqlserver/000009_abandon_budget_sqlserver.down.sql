-- Back to version 8: stageq.Claim as version 7 wrote it, stageq.FinishMany,
-- stageq.Finish and stageq.Rescue as version 2 wrote them (an expired lease
-- counts against max_attempts again; the outcome 'abandoned' is refused), and no
-- Tasks.abandons. Each abandon budget spent is forgotten. NOT RUN AGAINST A REAL
-- SQL SERVER. The column's DEFAULT constraint must go before the column.
-- https://learn.microsoft.com/sql/t-sql/statements/alter-table-transact-sql

SET XACT_ABORT ON;
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;

BEGIN TRANSACTION;

EXEC (N'
ALTER PROCEDURE stageq.Claim
    @Max      int,
    @WorkerId nvarchar(200),
    @Token    bigint,
    @LeaseMs  int,
    @Kinds    nvarchar(max) = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

    DECLARE @Now datetime2(7), @Expires datetime2(7), @Count int = 0, @Top int, @Prev int,
            @Take int, @Batch int, @Clock bigint, @Gated bit = 0,
            @Seen int, @Looked int = 0, @Busy bit, @Seq int, @Cid bigint, @Cpid bigint,
            @Ckind nvarchar(200), @Ckey nvarchar(200), @Cmax int, @Cweight int, @Lock bigint,
            @Admit bit, @LimitMax int, @KindKey nvarchar(205), @Back bigint;
    DECLARE @Due TABLE (id bigint NOT NULL PRIMARY KEY, process_id bigint NOT NULL);
    DECLARE @Claimed TABLE (
        id bigint NOT NULL PRIMARY KEY, process_id bigint NOT NULL, process_name nvarchar(200) NOT NULL,
        execution_order int NOT NULL, kind nvarchar(200) NOT NULL, body nvarchar(max) NOT NULL,
        attempt int NOT NULL, max_attempts int NOT NULL, atomic bit NOT NULL,
        schedule_name nvarchar(200) NULL, scheduled_for datetime2(7) NULL);
    DECLARE @Cand TABLE (
        seq int IDENTITY(1, 1) NOT NULL PRIMARY KEY, id bigint NOT NULL, process_id bigint NOT NULL,
        kind nvarchar(200) NOT NULL, limit_key nvarchar(200) NULL, max_parallel int NULL, weight int NOT NULL);
    DECLARE @FullProcess TABLE (id bigint NOT NULL PRIMARY KEY);
    DECLARE @FullLimit TABLE ([key] nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY);
    DECLARE @FullKind TABLE (kind nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY);
    -- The kinds the worker runs; @AnyKind = 1 (no @Kinds): every kind.
    DECLARE @KindSet TABLE (kind nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL PRIMARY KEY);
    DECLARE @AnyKind bit = CASE WHEN @Kinds IS NULL THEN 1 ELSE 0 END;
    IF @Kinds IS NOT NULL AND ISJSON(@Kinds) = 0
        THROW 50006, N''stageq: @Kinds must be a JSON array of kinds'', 1;
    INSERT INTO @KindSet (kind)
    SELECT DISTINCT CAST(j.[value] AS nvarchar(200)) FROM OPENJSON(@Kinds) AS j
     WHERE @Kinds IS NOT NULL AND j.[type] = 1;

    IF @Max IS NULL OR @Max < 0 SET @Max = 0;
    IF @Max > 1000 SET @Max = 1000;
    IF @LeaseMs IS NULL OR @LeaseMs < 1
        THROW 50005, N''stageq: the lease must be at least 1 ms'', 1;

    BEGIN TRY
        BEGIN TRANSACTION;
        SET @Now = SYSUTCDATETIME();
        SET @Expires = DATEADD(millisecond, @LeaseMs, @Now);

        -- 1. Due scheduled tasks. The check reads past held rows and keeps no lock.
        IF @Max > 0 AND EXISTS (SELECT 1 FROM stageq.Tasks AS s WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Tasks_Due))
                                 WHERE s.state = ''scheduled'' AND s.run_at <= @Now)
        BEGIN
            INSERT INTO @Due (id, process_id)
            SELECT TOP (1000) s.id, s.process_id
              FROM stageq.Tasks AS s WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK, INDEX(IX_Tasks_Due))
             WHERE s.state = ''scheduled'' AND s.run_at <= @Now
             ORDER BY s.run_at;
            SET @Clock = NEXT VALUE FOR stageq.VClock;
            -- The weight is read past a process row held elsewhere (its tasks then
            -- wait for a later claim): this claim never waits while it holds rows.
            UPDATE t
               SET state = ''available'',
                   vtime = COALESCE(h.vtime, @Clock) + (r.rk - 1) * (1000000 / p.weight)
              FROM stageq.Tasks AS t WITH (ROWLOCK, FORCESEEK)
              JOIN (SELECT d.id, d.process_id, ROW_NUMBER() OVER (PARTITION BY d.process_id ORDER BY d.id) AS rk
                      FROM @Due AS d) AS r ON r.id = t.id
              JOIN stageq.Processes AS p WITH (READPAST, READCOMMITTEDLOCK, INDEX(PK_Processes)) ON p.id = r.process_id
             OUTER APPLY (SELECT TOP (1) a.vtime
                            FROM stageq.Tasks AS a WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Tasks_Claim))
                           WHERE a.state = ''available'' AND a.process_priority = t.process_priority
                           ORDER BY a.process_priority DESC, a.vtime, a.id) AS h
             WHERE t.state = ''scheduled'';
        END;

        -- A limit row or a capped process sends the claim down the gated path. Not
        -- READPAST: a limit row held by its writer must not read as "no limit".
        IF EXISTS (SELECT 1 FROM stageq.Limits AS l WITH (READCOMMITTEDLOCK))
           OR EXISTS (SELECT 1 FROM stageq.Processes AS c WITH (READCOMMITTEDLOCK, INDEX(IX_Processes_Capped))
                       WHERE c.max_parallel IS NOT NULL)
            SET @Gated = 1;

        -- 2. The fast path: one UPDATE per priority level.
        WHILE @Gated = 0 AND @Count < @Max
        BEGIN
            SET @Top = NULL;
            SELECT TOP (1) @Top = h.process_priority
              FROM stageq.Tasks AS h WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Tasks_Claim))
             WHERE h.state = ''available''
               AND (@AnyKind = 1 OR h.kind IN (SELECT k.kind FROM @KindSet AS k))
             ORDER BY h.process_priority DESC, h.vtime, h.id;
            IF @Top IS NULL
                BREAK;
            SET @Take = @Max - @Count;
            WITH c AS (
                SELECT TOP (@Take) t.id, t.process_id, t.process_name, t.execution_order, t.kind, t.body,
                       t.state, t.attempt, t.max_attempts, t.atomic, t.worker_id, t.lease_token,
                       t.lease_expires_at, t.schedule_name, t.scheduled_for
                  FROM stageq.Tasks AS t WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK, INDEX(IX_Tasks_Claim))
                 WHERE t.state = ''available'' AND t.process_priority = @Top
                   AND (@AnyKind = 1 OR t.kind IN (SELECT k.kind FROM @KindSet AS k))
                 ORDER BY t.process_priority DESC, t.vtime, t.id)
            UPDATE c
               SET state = ''running'', attempt = attempt + 1, worker_id = @WorkerId,
                   lease_token = @Token, lease_expires_at = @Expires
            OUTPUT inserted.id, inserted.process_id, inserted.process_name, inserted.execution_order,
                   inserted.kind, inserted.body, inserted.attempt, inserted.max_attempts, inserted.atomic,
                   inserted.schedule_name, inserted.scheduled_for
              INTO @Claimed (id, process_id, process_name, execution_order, kind, body, attempt,
                             max_attempts, atomic, schedule_name, scheduled_for);
            SET @Batch = @@ROWCOUNT;
            SET @Count = @Count + @Batch;
            -- Nothing taken: what is left at this priority is another claim''s.
            IF @Batch = 0
                BREAK;
        END;

        -- 3. The gated path. @Looked bounds the candidates one claim locks.
        WHILE @Gated = 1 AND @Count < @Max AND @Looked < 4 * @Max + 64
        BEGIN
            SET @Top = NULL;
            SELECT TOP (1) @Top = h.process_priority
              FROM stageq.Tasks AS h WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Tasks_Claim))
             WHERE h.state = ''available'' AND (@Prev IS NULL OR h.process_priority < @Prev)
               AND (@AnyKind = 1 OR h.kind IN (SELECT k.kind FROM @KindSet AS k))
             ORDER BY h.process_priority DESC, h.vtime, h.id;
            IF @Top IS NULL
                BREAK;

            -- Candidates, read keeping no lock; a process row held elsewhere hides
            -- its tasks from this claim.
            DELETE FROM @Cand;
            INSERT INTO @Cand (id, process_id, kind, limit_key, max_parallel, weight)
            SELECT TOP (@Max + 16) t.id, t.process_id, t.kind, t.limit_key, p.max_parallel, p.weight
              FROM stageq.Tasks AS t WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Tasks_Claim))
              JOIN stageq.Processes AS p WITH (READPAST, READCOMMITTEDLOCK, INDEX(PK_Processes)) ON p.id = t.process_id
             WHERE t.state = ''available'' AND t.process_priority = @Top
               AND NOT EXISTS (SELECT 1 FROM @FullProcess AS f WHERE f.id = t.process_id)
               AND NOT EXISTS (SELECT 1 FROM @FullLimit AS f WHERE f.[key] = t.limit_key)
               AND NOT EXISTS (SELECT 1 FROM @FullKind AS f WHERE f.kind = t.kind)
               AND (@AnyKind = 1 OR t.kind IN (SELECT k.kind FROM @KindSet AS k))
             ORDER BY t.process_priority DESC, t.vtime, t.id;
            SET @Seen = @@ROWCOUNT;
            SET @Looked = @Looked + @Seen;
            SET @Busy = 0;
            SET @Seq = 0;

            WHILE @Count < @Max
            BEGIN
                SELECT TOP (1) @Seq = c.seq, @Cid = c.id, @Cpid = c.process_id, @Ckind = c.kind,
                       @Ckey = c.limit_key, @Cmax = c.max_parallel, @Cweight = c.weight
                  FROM @Cand AS c
                 WHERE c.seq > @Seq
                 ORDER BY c.seq;
                IF @@ROWCOUNT = 0
                    BREAK;
                IF EXISTS (SELECT 1 FROM @FullProcess AS f WHERE f.id = @Cpid)
                   OR EXISTS (SELECT 1 FROM @FullLimit AS f WHERE f.[key] = @Ckey)
                   OR EXISTS (SELECT 1 FROM @FullKind AS f WHERE f.kind = @Ckind)
                    CONTINUE;

                SET @Lock = NULL;
                SELECT @Lock = t.id
                  FROM stageq.Tasks AS t WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK, INDEX(PK_Tasks))
                 WHERE t.id = @Cid AND t.state = ''available'';
                IF @Lock IS NULL
                BEGIN
                    SET @Busy = 1; -- another claim''s, or taken already
                    CONTINUE;
                END;

                SET @Admit = 1;
                IF @Cmax IS NOT NULL
                BEGIN
                    -- The cap is read again under the row lock, and the running
                    -- tasks counted after it: the count sees every task a previous
                    -- holder of this lock admitted.
                    SET @Lock = NULL;
                    SELECT @Lock = p.id, @Cmax = p.max_parallel
                      FROM stageq.Processes AS p WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK, INDEX(PK_Processes))
                     WHERE p.id = @Cpid;
                    IF @Lock IS NULL
                        SET @Admit = 0;
                    ELSE IF @Cmax IS NOT NULL
                         AND (SELECT COUNT(*) FROM stageq.Tasks AS r WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Running))
                               WHERE r.process_id = @Cpid AND r.state = ''running'') >= @Cmax
                        SET @Admit = 0;
                    IF @Admit = 0
                        INSERT INTO @FullProcess (id) VALUES (@Cpid);
                END;

                IF @Admit = 1 AND @Ckey IS NOT NULL
                   AND EXISTS (SELECT 1 FROM stageq.Limits AS l WITH (READCOMMITTEDLOCK) WHERE l.[key] = @Ckey)
                BEGIN
                    SET @LimitMax = NULL;
                    SELECT @LimitMax = l.max_running
                      FROM stageq.Limits AS l WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
                     WHERE l.[key] = @Ckey;
                    IF @LimitMax IS NULL
                       OR (SELECT COUNT(*) FROM stageq.Tasks AS r WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_RunningLimit))
                            WHERE r.limit_key = @Ckey AND r.state = ''running'') >= @LimitMax
                    BEGIN
                        SET @Admit = 0;
                        INSERT INTO @FullLimit ([key]) VALUES (@Ckey);
                    END;
                END;

                SET @KindKey = CONCAT(N''kind:'', @Ckind);
                IF @Admit = 1
                   AND EXISTS (SELECT 1 FROM stageq.Limits AS l WITH (READCOMMITTEDLOCK) WHERE l.[key] = @KindKey)
                BEGIN
                    SET @LimitMax = NULL;
                    SELECT @LimitMax = l.max_running
                      FROM stageq.Limits AS l WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
                     WHERE l.[key] = @KindKey;
                    IF @LimitMax IS NULL
                       OR (SELECT COUNT(*) FROM stageq.Tasks AS r WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Running))
                            WHERE r.kind = @Ckind AND r.state = ''running'') >= @LimitMax
                    BEGIN
                        SET @Admit = 0;
                        INSERT INTO @FullKind (kind) VALUES (@Ckind);
                    END;
                END;

                IF @Admit = 1
                BEGIN
                    -- Held with an update lock since it was read: no other session
                    -- can have changed it.
                    UPDATE stageq.Tasks
                       SET state = ''running'', attempt = attempt + 1, worker_id = @WorkerId,
                           lease_token = @Token, lease_expires_at = @Expires
                    OUTPUT inserted.id, inserted.process_id, inserted.process_name, inserted.execution_order,
                           inserted.kind, inserted.body, inserted.attempt, inserted.max_attempts, inserted.atomic,
                           inserted.schedule_name, inserted.scheduled_for
                      INTO @Claimed (id, process_id, process_name, execution_order, kind, body, attempt,
                                     max_attempts, atomic, schedule_name, scheduled_for)
                     WHERE id = @Cid AND state = ''available'';
                    SET @Count = @Count + @@ROWCOUNT;
                END
                ELSE
                BEGIN
                    -- Refused: it loses its turn and goes behind the current
                    -- virtual time of its priority.
                    EXEC stageq.VNow @Priority = @Top, @VNow = @Back OUTPUT;
                    SET @Back = @Back + 1000000 / @Cweight;
                    UPDATE stageq.Tasks
                       SET vtime = CASE WHEN vtime > @Back THEN vtime ELSE @Back END
                     WHERE id = @Cid;
                END;
            END;

            IF @Count >= @Max OR @Busy = 1
                BREAK;
            -- A full list: the same priority again, past the full ones; otherwise
            -- this priority has nothing this claim may take, so the next one down.
            IF @Seen < @Max + 16
                SET @Prev = @Top;
        END;

        -- The start of each attempt''s audit row, in the claim''s transaction.
        INSERT INTO stageq.Logs (task_id, process_id, process_name, execution_order, kind, body, worker_id,
                                 attempt, lease_token, started_at, schedule_name, scheduled_for)
        SELECT c.id, c.process_id, c.process_name, c.execution_order, c.kind, c.body, @WorkerId,
               c.attempt, @Token, @Now, c.schedule_name, c.scheduled_for
          FROM @Claimed AS c;

        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
        THROW;
    END CATCH;

    SELECT c.id, c.process_id, c.process_name, c.execution_order, c.kind, c.body, c.attempt,
           c.max_attempts, c.atomic
      FROM @Claimed AS c
     ORDER BY c.id;
    RETURN 0;
END;
');

EXEC (N'
ALTER PROCEDURE stageq.FinishMany
    @Results   nvarchar(max),
    @ResultSet bit = 1,
    @Held      int = 0 OUTPUT
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

    DECLARE @Now datetime2(7), @Pid bigint, @Cur int, @N int;
    DECLARE @R TABLE (
        seq int NOT NULL PRIMARY KEY, id bigint NULL, token bigint NULL, outcome varchar(20) NULL,
        error nvarchar(max) NULL, retry_ms bigint NULL);
    DECLARE @Ended TABLE (
        id bigint NOT NULL PRIMARY KEY, process_id bigint NOT NULL, execution_order int NOT NULL,
        final bit NOT NULL DEFAULT (0), retry_at datetime2(7) NULL);
    DECLARE @Handed TABLE (id bigint NOT NULL PRIMARY KEY); -- processes of hand-backs and final failures
    DECLARE @Advance TABLE (id bigint NOT NULL PRIMARY KEY);

    SET @Held = 0;
    IF @Results IS NULL OR ISJSON(@Results) <> 1
        THROW 50004, N''stageq: finish results must be a JSON array'', 1;
    INSERT INTO @R (seq, id, token, outcome, error, retry_ms)
    SELECT CONVERT(int, e.[key]) + 1, j.id, j.token, j.outcome, NULLIF(j.error, N''''), COALESCE(j.retry_ms, 0)
      FROM OPENJSON(@Results) AS e
     CROSS APPLY OPENJSON(e.[value]) WITH (
           id       bigint        ''$.id'',
           token    bigint        ''$.token'',
           outcome  varchar(20)   ''$.outcome'',
           error    nvarchar(max) ''$.error'',
           retry_ms bigint        ''$.retry_ms'') AS j;
    IF (SELECT COUNT(*) FROM @R) > 1000
        THROW 50004, N''stageq: at most 1000 results per call'', 1;
    IF EXISTS (SELECT 1 FROM @R AS r
                WHERE r.id IS NULL OR r.token IS NULL OR r.outcome IS NULL
                   OR r.outcome NOT IN (''succeeded'', ''failed'', ''released''))
        THROW 50004, N''stageq: each result needs an id, a token and an outcome of succeeded, failed or released'', 1;
    IF EXISTS (SELECT 1 FROM @R AS r WHERE r.retry_ms < 0 OR r.retry_ms > 315360000000)
        THROW 50004, N''stageq: retry delay must be from 0 to 315360000000 ms (ten years)'', 1;
    IF EXISTS (SELECT 1 FROM @R AS r GROUP BY r.id HAVING COUNT(*) > 1)
        THROW 50004, N''stageq: a task appears twice in one batch of results'', 1;

    BEGIN TRY
        BEGIN TRANSACTION;

        IF EXISTS (SELECT 1 FROM @R AS r WHERE r.outcome <> ''succeeded'')
        BEGIN
            INSERT INTO @Handed (id)
            SELECT DISTINCT t.process_id
              FROM @R AS r
              JOIN stageq.Tasks AS t WITH (READCOMMITTEDLOCK, FORCESEEK) ON t.id = r.id
             WHERE r.outcome <> ''succeeded'' AND t.lease_token = r.token AND t.state = ''running'';
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
         WHERE r.outcome = ''succeeded'' AND t.lease_token = r.token AND t.state = ''running'';

        IF EXISTS (SELECT 1 FROM @Handed)
            UPDATE t
               SET state = CASE WHEN r.outcome = ''failed'' AND r.retry_ms <= 0 THEN ''failed''
                                WHEN p.current_order IS NULL OR t.execution_order <> p.current_order
                                     OR p.paused = 1 THEN ''blocked''
                                WHEN r.outcome = ''failed'' THEN ''scheduled''
                                ELSE ''available'' END,
                   attempt = CASE WHEN r.outcome = ''released'' THEN t.attempt - 1 ELSE t.attempt END,
                   run_at = CASE WHEN r.outcome = ''released'' THEN @Now
                                 WHEN r.outcome = ''failed'' AND r.retry_ms > 0
                                 THEN DATEADD(millisecond, CONVERT(int, r.retry_ms % 1000),
                                              DATEADD(second, CONVERT(int, r.retry_ms / 1000), @Now))
                                 ELSE t.run_at END,
                   last_error = CASE WHEN r.outcome = ''failed'' THEN r.error ELSE t.last_error END,
                   worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
            OUTPUT inserted.id, inserted.process_id, inserted.execution_order,
                   CASE WHEN inserted.state = ''failed'' THEN 1 ELSE 0 END,
                   CASE WHEN r.outcome = ''failed'' AND r.retry_ms > 0 THEN inserted.run_at END
              INTO @Ended (id, process_id, execution_order, final, retry_at)
              FROM stageq.Tasks AS t WITH (ROWLOCK, FORCESEEK)
              JOIN @R AS r ON r.id = t.id
              JOIN stageq.Processes AS p WITH (READCOMMITTEDLOCK, INDEX(PK_Processes)) ON p.id = t.process_id
             WHERE r.outcome <> ''succeeded'' AND t.lease_token = r.token AND t.state = ''running'';

        SET @N = (SELECT COUNT(*) FROM @Ended);
        IF @N > 0
        BEGIN
            UPDATE l
               SET ended_at = @Now, duration_ms = DATEDIFF_BIG(millisecond, l.started_at, @Now),
                   outcome = r.outcome, error = r.error, retry_at = e.retry_at
              FROM stageq.Logs AS l WITH (ROWLOCK, INDEX(IX_Logs_Task))
              JOIN @Ended AS e ON e.id = l.task_id
              JOIN @R AS r ON r.id = e.id
             WHERE l.lease_token = r.token;

            IF EXISTS (SELECT 1 FROM @Ended AS e WHERE e.final = 1)
                UPDATE p
                   SET failed_tasks = p.failed_tasks + f.n,
                       state = CASE WHEN p.state = ''active'' THEN ''failed'' ELSE p.state END,
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
                                  AND s.state <> ''running'');
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
');

EXEC (N'
ALTER PROCEDURE stageq.Finish
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
    IF @Outcome IS NULL OR @Outcome NOT IN (''succeeded'', ''failed'', ''released'')
        THROW 50004, N''stageq: finish outcome must be succeeded, failed or released'', 1;
    IF @RetryMs IS NOT NULL AND (@RetryMs < 0 OR @RetryMs > 315360000000)
        THROW 50004, N''stageq: retry delay must be from 0 to 315360000000 ms (ten years)'', 1;
    IF @TaskId IS NULL OR @Token IS NULL
        RETURN 0;

    SET @Results = (SELECT @TaskId AS id, @Token AS token, @Outcome AS outcome, @Error AS error,
                           COALESCE(@RetryMs, 0) AS retry_ms
                    FOR JSON PATH);
    EXEC stageq.FinishMany @Results = @Results, @ResultSet = 0, @Held = @Count OUTPUT;
    SET @Held = CASE WHEN @Count > 0 THEN 1 ELSE 0 END;
    RETURN 0;
END;
');

EXEC (N'
ALTER PROCEDURE stageq.Rescue
    @Max     int = 100,
    @Rescued int = 0 OUTPUT
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

    DECLARE @Seq int = 0, @Id bigint, @ProcessId bigint, @WorkerId nvarchar(200), @Token bigint,
            @Lock bigint, @Attempt int, @MaxAttempts int, @Now datetime2(7), @Msg nvarchar(400),
            @NewState varchar(20), @Pid bigint = 0, @Busy bit;
    DECLARE @Candidates TABLE (
        seq int IDENTITY(1, 1) NOT NULL PRIMARY KEY, id bigint NOT NULL, process_id bigint NOT NULL,
        worker_id nvarchar(200) NOT NULL, lease_token bigint NOT NULL);
    DECLARE @Stalled TABLE (id bigint NOT NULL PRIMARY KEY);

    SET @Rescued = 0;
    IF @Max IS NULL OR @Max < 1 SET @Max = 100;
    IF @Max > 1000 SET @Max = 1000;

    -- Candidates, read keeping no lock: READPAST passes over rows another session
    -- is changing right now (a finish, an extension); the next pass sees them.
    -- Running tasks are bounded by the cluster''s concurrency.
    INSERT INTO @Candidates (id, process_id, worker_id, lease_token)
    SELECT TOP (@Max) t.id, t.process_id, t.worker_id, t.lease_token
      FROM stageq.Tasks AS t WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Tasks_Running))
     WHERE t.state = ''running'' AND t.lease_expires_at < SYSUTCDATETIME()
       AND t.worker_id IS NOT NULL AND t.lease_token IS NOT NULL
     ORDER BY t.process_id, t.id;

    WHILE 1 = 1
    BEGIN
        SELECT TOP (1) @Seq = c.seq, @Id = c.id, @ProcessId = c.process_id,
               @WorkerId = c.worker_id, @Token = c.lease_token
          FROM @Candidates AS c
         WHERE c.seq > @Seq
         ORDER BY c.seq;
        IF @@ROWCOUNT = 0
            BREAK;

        BEGIN TRY
            BEGIN TRANSACTION;
            SET @Lock = NULL;
            SELECT @Lock = p.id
              FROM stageq.Processes AS p WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK, INDEX(PK_Processes))
             WHERE p.id = @ProcessId;
            IF @Lock IS NOT NULL
            BEGIN
                SET @Now = SYSUTCDATETIME();
                -- Re-checked under an update lock: a lease extended or a task
                -- finished since the candidates were read no longer matches.
                SET @Attempt = NULL;
                SELECT @Attempt = t.attempt, @MaxAttempts = t.max_attempts
                  FROM stageq.Tasks AS t WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK, INDEX(PK_Tasks))
                 WHERE t.id = @Id AND t.lease_token = @Token AND t.state = ''running''
                   AND t.lease_expires_at < @Now;
                IF @Attempt IS NOT NULL
                BEGIN
                    SET @Msg = CONCAT(N''lease expired: worker '', @WorkerId, N'' stopped extending it'');
                    -- Handed back blocked: OpenStage makes it available again, with
                    -- a fresh turn, when its stage is still the open one.
                    SET @NewState = CASE WHEN @Attempt >= @MaxAttempts THEN ''failed'' ELSE ''blocked'' END;
                    UPDATE stageq.Tasks
                       SET state = @NewState, run_at = @Now, last_error = @Msg,
                           worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
                     WHERE id = @Id;
                    IF @NewState = ''failed''
                        UPDATE stageq.Processes SET failed_tasks = failed_tasks + 1 WHERE id = @ProcessId;

                    UPDATE l
                       SET ended_at = @Now, duration_ms = DATEDIFF_BIG(millisecond, l.started_at, @Now),
                           outcome = ''abandoned'', error = @Msg
                      FROM stageq.Logs AS l WITH (ROWLOCK, INDEX(IX_Logs_Task))
                     WHERE l.task_id = @Id AND l.lease_token = @Token;

                    EXEC stageq.OpenStage @ProcessId = @ProcessId;
                    SET @Rescued = @Rescued + 1;
                END;
            END;
            COMMIT TRANSACTION;
        END TRY
        BEGIN CATCH
            IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
            THROW;
        END CATCH;
    END;

    -- Lost advances: unfinished processes whose current stage has no task left.
    -- Read past held rows; AdvanceProcess decides under the lock.
    INSERT INTO @Stalled (id)
    SELECT TOP (@Max) p.id
      FROM stageq.Processes AS p WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Processes_Open))
     WHERE p.state IN (''active'', ''failed'')
       AND (p.current_order IS NULL
            OR NOT EXISTS (SELECT 1 FROM stageq.Tasks AS t WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Tasks_Stage))
                            WHERE t.process_id = p.id AND t.execution_order = p.current_order))
     ORDER BY p.id;
    WHILE 1 = 1
    BEGIN
        SELECT TOP (1) @Pid = s.id FROM @Stalled AS s WHERE s.id > @Pid ORDER BY s.id;
        IF @@ROWCOUNT = 0
            BREAK;
        EXEC stageq.AdvanceProcess @ProcessId = @Pid, @Busy = @Busy OUTPUT;
    END;
    RETURN 0;
END;
');

-- IF EXISTS (2016+): an engine that keeps no named defaults (Babelfish) has none
-- to drop, as in version 2.
ALTER TABLE stageq.Tasks DROP CONSTRAINT IF EXISTS DF_Tasks_abandons;
ALTER TABLE stageq.Tasks DROP COLUMN abandons;

COMMIT TRANSACTION;
