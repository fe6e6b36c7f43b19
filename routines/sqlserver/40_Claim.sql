-- Claim: leases up to @Max tasks (at most 1,000) of the kinds in @Kinds (NULL:
-- every kind) to @WorkerId with lease token @Token for @LeaseMs, writes their Logs
-- rows and returns them (with abandons), in one transaction; lock-free fast path,
-- gated path under limits. Final definition: migration 000009 (ALTER).
CREATE PROCEDURE stageq_routines.Claim
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
        attempt int NOT NULL, max_attempts int NOT NULL, atomic bit NOT NULL, abandons int NOT NULL,
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
        THROW 50006, N'stageq: @Kinds must be a JSON array of kinds', 1;
    INSERT INTO @KindSet (kind)
    SELECT DISTINCT CAST(j.[value] AS nvarchar(200)) FROM OPENJSON(@Kinds) AS j
     WHERE @Kinds IS NOT NULL AND j.[type] = 1;

    IF @Max IS NULL OR @Max < 0 SET @Max = 0;
    IF @Max > 1000 SET @Max = 1000;
    IF @LeaseMs IS NULL OR @LeaseMs < 1
        THROW 50005, N'stageq: the lease must be at least 1 ms', 1;

    BEGIN TRY
        BEGIN TRANSACTION;
        SET @Now = SYSUTCDATETIME();
        SET @Expires = DATEADD(millisecond, @LeaseMs, @Now);

        -- 1. Due scheduled tasks. The check reads past held rows and keeps no lock.
        IF @Max > 0 AND EXISTS (SELECT 1 FROM stageq.Tasks AS s WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Tasks_Due))
                                 WHERE s.state = 'scheduled' AND s.run_at <= @Now)
        BEGIN
            INSERT INTO @Due (id, process_id)
            SELECT TOP (1000) s.id, s.process_id
              FROM stageq.Tasks AS s WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK, INDEX(IX_Tasks_Due))
             WHERE s.state = 'scheduled' AND s.run_at <= @Now
             ORDER BY s.run_at;
            SET @Clock = NEXT VALUE FOR stageq.VClock;
            -- The weight is read past a process row held elsewhere (its tasks then
            -- wait for a later claim): this claim never waits while it holds rows.
            UPDATE t
               SET state = 'available',
                   vtime = COALESCE(h.vtime, @Clock) + (r.rk - 1) * (1000000 / p.weight)
              FROM stageq.Tasks AS t WITH (ROWLOCK, FORCESEEK)
              JOIN (SELECT d.id, d.process_id, ROW_NUMBER() OVER (PARTITION BY d.process_id ORDER BY d.id) AS rk
                      FROM @Due AS d) AS r ON r.id = t.id
              JOIN stageq.Processes AS p WITH (READPAST, READCOMMITTEDLOCK, INDEX(PK_Processes)) ON p.id = r.process_id
             OUTER APPLY (SELECT TOP (1) a.vtime
                            FROM stageq.Tasks AS a WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Tasks_Claim))
                           WHERE a.state = 'available' AND a.process_priority = t.process_priority
                           ORDER BY a.process_priority DESC, a.vtime, a.id) AS h
             WHERE t.state = 'scheduled';
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
             WHERE h.state = 'available'
               AND (@AnyKind = 1 OR h.kind IN (SELECT k.kind FROM @KindSet AS k))
             ORDER BY h.process_priority DESC, h.vtime, h.id;
            IF @Top IS NULL
                BREAK;
            SET @Take = @Max - @Count;
            WITH c AS (
                SELECT TOP (@Take) t.id, t.process_id, t.process_name, t.execution_order, t.kind, t.body,
                       t.state, t.attempt, t.max_attempts, t.atomic, t.abandons, t.worker_id, t.lease_token,
                       t.lease_expires_at, t.schedule_name, t.scheduled_for
                  FROM stageq.Tasks AS t WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK, INDEX(IX_Tasks_Claim))
                 WHERE t.state = 'available' AND t.process_priority = @Top
                   AND (@AnyKind = 1 OR t.kind IN (SELECT k.kind FROM @KindSet AS k))
                 ORDER BY t.process_priority DESC, t.vtime, t.id)
            UPDATE c
               SET state = 'running', attempt = attempt + 1, worker_id = @WorkerId,
                   lease_token = @Token, lease_expires_at = @Expires
            OUTPUT inserted.id, inserted.process_id, inserted.process_name, inserted.execution_order,
                   inserted.kind, inserted.body, inserted.attempt, inserted.max_attempts, inserted.atomic, inserted.abandons,
                   inserted.schedule_name, inserted.scheduled_for
              INTO @Claimed (id, process_id, process_name, execution_order, kind, body, attempt,
                             max_attempts, atomic, abandons, schedule_name, scheduled_for);
            SET @Batch = @@ROWCOUNT;
            SET @Count = @Count + @Batch;
            -- Nothing taken: what is left at this priority is another claim's.
            IF @Batch = 0
                BREAK;
        END;

        -- 3. The gated path. @Looked bounds the candidates one claim locks.
        WHILE @Gated = 1 AND @Count < @Max AND @Looked < 4 * @Max + 64
        BEGIN
            SET @Top = NULL;
            SELECT TOP (1) @Top = h.process_priority
              FROM stageq.Tasks AS h WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Tasks_Claim))
             WHERE h.state = 'available' AND (@Prev IS NULL OR h.process_priority < @Prev)
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
             WHERE t.state = 'available' AND t.process_priority = @Top
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
                 WHERE t.id = @Cid AND t.state = 'available';
                IF @Lock IS NULL
                BEGIN
                    SET @Busy = 1; -- another claim's, or taken already
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
                               WHERE r.process_id = @Cpid AND r.state = 'running') >= @Cmax
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
                            WHERE r.limit_key = @Ckey AND r.state = 'running') >= @LimitMax
                    BEGIN
                        SET @Admit = 0;
                        INSERT INTO @FullLimit ([key]) VALUES (@Ckey);
                    END;
                END;

                SET @KindKey = CONCAT(N'kind:', @Ckind);
                IF @Admit = 1
                   AND EXISTS (SELECT 1 FROM stageq.Limits AS l WITH (READCOMMITTEDLOCK) WHERE l.[key] = @KindKey)
                BEGIN
                    SET @LimitMax = NULL;
                    SELECT @LimitMax = l.max_running
                      FROM stageq.Limits AS l WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
                     WHERE l.[key] = @KindKey;
                    IF @LimitMax IS NULL
                       OR (SELECT COUNT(*) FROM stageq.Tasks AS r WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Running))
                            WHERE r.kind = @Ckind AND r.state = 'running') >= @LimitMax
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
                       SET state = 'running', attempt = attempt + 1, worker_id = @WorkerId,
                           lease_token = @Token, lease_expires_at = @Expires
                    OUTPUT inserted.id, inserted.process_id, inserted.process_name, inserted.execution_order,
                           inserted.kind, inserted.body, inserted.attempt, inserted.max_attempts, inserted.atomic, inserted.abandons,
                           inserted.schedule_name, inserted.scheduled_for
                      INTO @Claimed (id, process_id, process_name, execution_order, kind, body, attempt,
                                     max_attempts, atomic, abandons, schedule_name, scheduled_for)
                     WHERE id = @Cid AND state = 'available';
                    SET @Count = @Count + @@ROWCOUNT;
                END
                ELSE
                BEGIN
                    -- Refused: it loses its turn and goes behind the current
                    -- virtual time of its priority.
                    EXEC stageq_routines.VNow @Priority = @Top, @VNow = @Back OUTPUT;
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

        -- The start of each attempt's audit row, in the claim's transaction.
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
           c.max_attempts, c.atomic, c.abandons
      FROM @Claimed AS c
     ORDER BY c.id;
    RETURN 0;
END;
