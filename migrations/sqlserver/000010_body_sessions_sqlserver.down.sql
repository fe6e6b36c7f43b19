-- Back to version 9: stageq.Rescue as version 9 wrote it (it frees an expired
-- lease without ending the attempt's body), no stageq.BodySession and no
-- Logs.session. NOT RUN AGAINST A REAL SQL SERVER. Rescue is altered first, so
-- nothing refers to the column when it is dropped. Sessions already tagged keep
-- their CONTEXT_INFO until they end; nothing reads it any more.
-- https://learn.microsoft.com/sql/t-sql/statements/drop-procedure-transact-sql
-- https://learn.microsoft.com/sql/t-sql/statements/alter-table-transact-sql

SET XACT_ABORT ON;
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;

BEGIN TRANSACTION;

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
            @Lock bigint, @Abandons int, @Now datetime2(7), @Msg nvarchar(1000),
            @NewState varchar(20), @Pid bigint = 0, @Busy bit;
    -- The abandon budget (PostgreSQL: stageq.max_abandons()); stageq.FinishMany has the same.
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
                SET @Abandons = NULL;
                SELECT @Abandons = t.abandons
                  FROM stageq.Tasks AS t WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK, INDEX(PK_Tasks))
                 WHERE t.id = @Id AND t.lease_token = @Token AND t.state = ''running''
                   AND t.lease_expires_at < @Now;
                IF @Abandons IS NOT NULL
                BEGIN
                    -- Lost to infrastructure: the attempt counts against the abandon
                    -- budget, not max_attempts; out of that budget the task fails.
                    SET @Msg = CONCAT(N''lease expired: worker '', @WorkerId, N'' stopped extending it'');
                    SET @Msg = CASE WHEN @Abandons + 1 >= @MaxAbandons
                                    THEN CONCAT(@Msg, N''; abandoned '', @Abandons + 1,
                                                N'' times (its worker died or lost its database connection each time): failed for good'')
                                    ELSE CONCAT(@Msg, N'' (abandoned '', @Abandons + 1, N'' of '', @MaxAbandons,
                                                N'' times; not counted against max_attempts)'') END;
                    -- Handed back blocked: OpenStage makes it available again, with
                    -- a fresh turn, when its stage is still the open one.
                    SET @NewState = CASE WHEN @Abandons + 1 >= @MaxAbandons THEN ''failed'' ELSE ''blocked'' END;
                    UPDATE stageq.Tasks
                       SET state = @NewState, abandons = abandons + 1, run_at = @Now, last_error = @Msg,
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


DROP PROCEDURE IF EXISTS stageq.BodySession;
ALTER TABLE stageq.Logs DROP COLUMN [session];

COMMIT TRANSACTION;
