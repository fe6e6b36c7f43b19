-- Rescue: returns up to @Max tasks whose lease expired to the queue (KILLing a
-- body still running in its recorded session first), charging the abandon budget,
-- and closes their Logs rows as abandoned; then repairs processes whose stage
-- ended without being advanced. Final definition: migration 000010 (ALTER).
CREATE PROCEDURE stageq_routines.Rescue
    @Max     int = 100,
    @Rescued int = 0 OUTPUT
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

    DECLARE @Seq int = 0, @Id bigint, @ProcessId bigint, @WorkerId nvarchar(200), @Token bigint,
            @Lock bigint, @Abandons int, @Now datetime2(7), @Msg nvarchar(1000),
            @NewState varchar(20), @Pid bigint = 0, @Busy bit,
            @BodySpid int, @Tag varbinary(128), @Kill nvarchar(100);
    -- The abandon budget (PostgreSQL: stageq.max_abandons()); stageq_routines.FinishMany has the same.
    DECLARE @MaxAbandons int = 10;
    DECLARE @Candidates TABLE (
        seq int IDENTITY(1, 1) NOT NULL PRIMARY KEY, id bigint NOT NULL, process_id bigint NOT NULL,
        worker_id nvarchar(200) NOT NULL, lease_token bigint NOT NULL);
    DECLARE @Stalled TABLE (id bigint NOT NULL PRIMARY KEY);

    SET @Rescued = 0;
    IF @Max IS NULL OR @Max < 1 SET @Max = 100;
    IF @Max > 1000 SET @Max = 1000;

    -- Candidates, read keeping no lock: READPAST passes over rows another session
    -- is changing right now (a finish, an extension); the next pass sees them.
    -- Running tasks are bounded by the cluster's concurrency.
    INSERT INTO @Candidates (id, process_id, worker_id, lease_token)
    SELECT TOP (@Max) t.id, t.process_id, t.worker_id, t.lease_token
      FROM stageq.Tasks AS t WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Tasks_Running))
     WHERE t.state = 'running' AND t.lease_expires_at < SYSUTCDATETIME()
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

        -- Version 10: the attempt's body may still run in its own session (its
        -- worker was killed; by Microsoft's documentation SQL Server notices a
        -- dead client only when it next writes to it, so the body runs on; not
        -- run here). If the session stageq_routines.BodySession
        -- recorded in the attempt's Logs row is still there, still tagged with this
        -- attempt (CONTEXT_INFO, which a reused session id does not carry) and
        -- runs a request, KILL it and leave the task running, keeping its slot
        -- under every limit, until a later pass finds the session gone: a limit
        -- counts bodies running. Seeing other sessions in the DMVs needs VIEW
        -- SERVER STATE (VIEW SERVER PERFORMANCE STATE on 2022 and later); without
        -- it only the caller's own session shows and the task is freed at once, as
        -- before version 10. KILL needs ALTER ANY CONNECTION (Azure SQL Database:
        -- KILL DATABASE CONNECTION); without it the KILL fails, the error is
        -- caught and the task waits for its body to end by itself, with an
        -- informational message (severity 10), as PostgreSQL warns.
        SET @BodySpid = NULL;
        SELECT TOP (1) @BodySpid = l.[session]
          FROM stageq.Logs AS l WITH (READCOMMITTEDLOCK, INDEX(IX_Logs_Task))
         WHERE l.task_id = @Id AND l.lease_token = @Token AND l.[session] IS NOT NULL;
        IF @BodySpid IS NOT NULL AND @BodySpid <> @@SPID
        BEGIN
            SET @Tag = CONVERT(varbinary(6), 'stageq') + CONVERT(binary(8), @Id) + CONVERT(binary(8), @Token);
            IF EXISTS (SELECT 1
                         FROM sys.dm_exec_sessions AS s
                         JOIN sys.dm_exec_requests AS q ON q.session_id = s.session_id
                        WHERE s.session_id = @BodySpid AND s.is_user_process = 1
                          AND SUBSTRING(s.context_info, 1, 22) = @Tag)
               AND EXISTS (SELECT 1 FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(PK_Tasks))
                            WHERE t.id = @Id AND t.lease_token = @Token AND t.state = 'running'
                              AND t.lease_expires_at < SYSUTCDATETIME())
            BEGIN
                -- KILL takes a literal session id, no variable: the statement is
                -- built from the int alone, so nothing but digits reaches it.
                SET @Kill = CONCAT(N'KILL ', CONVERT(nvarchar(11), @BodySpid), N';');
                BEGIN TRY
                    EXEC sys.sp_executesql @Kill;
                END TRY
                BEGIN CATCH
                    -- A session that ended meanwhile fails the KILL too: the next
                    -- pass frees the task. Anything else (no permission): the task
                    -- keeps its slot while its abandoned body runs.
                    SET @Msg = CONCAT(N'stageq: task ', @Id, N' keeps its slot while its abandoned body (session ',
                                      @BodySpid, N') runs: KILL failed with error ', ERROR_NUMBER(), N': ',
                                      ERROR_MESSAGE(), N' (grant ALTER ANY CONNECTION to the workers login)');
                    RAISERROR (N'%s', 10, 1, @Msg);
                END CATCH;
                CONTINUE;
            END;
        END;
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
                SET @Abandons = NULL;
                SELECT @Abandons = t.abandons
                  FROM stageq.Tasks AS t WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK, INDEX(PK_Tasks))
                 WHERE t.id = @Id AND t.lease_token = @Token AND t.state = 'running'
                   AND t.lease_expires_at < @Now;
                IF @Abandons IS NOT NULL
                BEGIN
                    -- Lost to infrastructure: the attempt counts against the abandon
                    -- budget, not max_attempts; out of that budget the task fails.
                    SET @Msg = CONCAT(N'lease expired: worker ', @WorkerId, N' stopped extending it');
                    SET @Msg = CASE WHEN @Abandons + 1 >= @MaxAbandons
                                    THEN CONCAT(@Msg, N'; abandoned ', @Abandons + 1,
                                                N' times (its worker died or lost its database connection each time): failed for good')
                                    ELSE CONCAT(@Msg, N' (abandoned ', @Abandons + 1, N' of ', @MaxAbandons,
                                                N' times; not counted against max_attempts)') END;
                    -- Handed back blocked: OpenStage makes it available again, with
                    -- a fresh turn, when its stage is still the open one.
                    SET @NewState = CASE WHEN @Abandons + 1 >= @MaxAbandons THEN 'failed' ELSE 'blocked' END;
                    UPDATE stageq.Tasks
                       SET state = @NewState, abandons = abandons + 1, run_at = @Now, last_error = @Msg,
                           worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
                     WHERE id = @Id;
                    IF @NewState = 'failed'
                        UPDATE stageq.Processes SET failed_tasks = failed_tasks + 1 WHERE id = @ProcessId;

                    UPDATE l
                       SET ended_at = @Now, duration_ms = DATEDIFF_BIG(millisecond, l.started_at, @Now),
                           outcome = 'abandoned', error = @Msg
                      FROM stageq.Logs AS l WITH (ROWLOCK, INDEX(IX_Logs_Task))
                     WHERE l.task_id = @Id AND l.lease_token = @Token;

                    EXEC stageq_routines.OpenStage @ProcessId = @ProcessId;
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
     WHERE p.state IN ('active', 'failed')
       AND (p.current_order IS NULL
            OR NOT EXISTS (SELECT 1 FROM stageq.Tasks AS t WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Tasks_Stage))
                            WHERE t.process_id = p.id AND t.execution_order = p.current_order))
     ORDER BY p.id;
    WHILE 1 = 1
    BEGIN
        SELECT TOP (1) @Pid = s.id FROM @Stalled AS s WHERE s.id > @Pid ORDER BY s.id;
        IF @@ROWCOUNT = 0
            BREAK;
        EXEC stageq_routines.AdvanceProcess @ProcessId = @Pid, @Busy = @Busy OUTPUT;
    END;
    RETURN 0;
END;
