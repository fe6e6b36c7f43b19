-- stageq 2 for SQL Server: the hot path without a hot row, the same design as
-- migrations/postgres/000002_hot_path.up.sql, in T-SQL written from Microsoft's
-- documentation (cited per statement). This file replaces a placeholder
-- (SELECT 1;) that landed on 2026-11-23; no SQL Server database was ever deployed
-- at version 2 with it, so no database needs the placeholder's version upgraded.
-- NOT RUN AGAINST A REAL SQL SERVER: see docs/sqlserver.md for what ran where.
--
-- Version 1 locked the process row in every claim (to advance its stride pass)
-- and in every completion (to re-derive its stage), and held it until commit:
-- one process drained one transaction at a time. Here no claim and no successful
-- completion locks a shared row:
--
-- * Fairness is decided when a task becomes available, not when it is claimed
--   (weighted fair queuing, start tags): a process with weight w has its tasks
--   stamped base, base + s, base + 2s, ... with s = 1,000,000 / w, from the later
--   of the current virtual time of its priority and the end of its own backlog
--   (Processes.vtail). A claim takes the available tasks with the highest process
--   priority (copied onto the task, Tasks.process_priority) and the lowest virtual
--   time, in one UPDATE per priority level with UPDLOCK, READPAST, ROWLOCK,
--   READCOMMITTEDLOCK. The virtual clock is a sequence (stageq.VClock): advancing
--   it takes no row lock and is not rolled back.
-- * A successful completion (stageq.FinishMany) deletes its task and closes its
--   Logs row, and nothing else. Whether it ended its stage is decided after it
--   committed (stageq.Advance): whoever commits the last task of a stage sees none
--   left, locks the process row once (READPAST: busy rows are reported back) and
--   opens the next stage. A crash in between is repaired by stageq.Rescue.
-- * Tasks whose run_at lies ahead wait as 'scheduled' (IX_Tasks_Due) and are made
--   available by the claim once due, so IX_Tasks_Claim holds only tasks that may
--   start now.
-- * Limits (stageq.Limits, Processes.max_parallel) keep their locks: a limit row
--   is where concurrent claims must agree. The claim takes the lock-free path
--   whenever no limit row and no capped process exists.
--
-- Filtered indexes (SQL Server's partial indexes) hold only the rows a statement
-- seeks: DML on their table needs ANSI_NULLS, ANSI_PADDING, ANSI_WARNINGS,
-- ARITHABORT, CONCAT_NULL_YIELDS_NULL and QUOTED_IDENTIFIER ON and
-- NUMERIC_ROUNDABORT OFF. ODBC, OLE DB, SqlClient and go-mssqldb sessions (it logs
-- in with the ODBC flag) have those, ARITHABORT implied by ANSI_WARNINGS at
-- compatibility level 90 and above; procedures keep the ANSI_NULLS and
-- QUOTED_IDENTIFIER of their creation, pinned ON below. A DB-Library-era client
-- with other defaults gets error 1934 instead of silently wrong data.
-- https://learn.microsoft.com/sql/relational-databases/indexes/create-filtered-indexes
-- https://learn.microsoft.com/sql/t-sql/statements/set-arithabort-transact-sql
--
-- How this file is run: one batch, as 000001. Statements that name a column added
-- here run in a dynamic batch of their own, EXEC (N'...'), because a batch is
-- compiled before its ALTER TABLE runs; procedures are created the same way,
-- with ALTER PROCEDURE for those of version 1 (their permissions stay) and CREATE
-- PROCEDURE for the new ones: a database that is not at version 1 fails loudly
-- instead of being half converted. One transaction: a failure leaves version 1
-- as it was.
-- https://learn.microsoft.com/sql/t-sql/statements/create-procedure-transact-sql
-- https://learn.microsoft.com/sql/t-sql/statements/create-sequence-transact-sql

SET XACT_ABORT ON;
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;

BEGIN TRANSACTION;

-- The queue's virtual clock: at least the newest virtual time stamped on a task;
-- the current virtual time of a priority with nothing available. Cached values
-- lost at a restart only move it forward.
CREATE SEQUENCE stageq.VClock AS bigint START WITH 0 INCREMENT BY 1 MINVALUE 0 NO CYCLE CACHE 50;

-- Processes: the run queue's columns go; vtail is the virtual time after its
-- last stamped task.
DROP INDEX IX_Processes_Queue ON stageq.Processes;
DROP INDEX IX_Processes_VTime ON stageq.Processes;
-- A column with a DEFAULT constraint cannot be dropped before it. IF EXISTS
-- (2016+): an engine that keeps no named defaults (Babelfish) has none to drop.
ALTER TABLE stageq.Processes DROP CONSTRAINT IF EXISTS DF_Processes_pass;
ALTER TABLE stageq.Processes DROP CONSTRAINT IF EXISTS DF_Processes_runnable;
ALTER TABLE stageq.Processes DROP COLUMN pass;
ALTER TABLE stageq.Processes DROP COLUMN runnable;
ALTER TABLE stageq.Processes DROP COLUMN ready_at;
ALTER TABLE stageq.Processes ADD vtail bigint NOT NULL CONSTRAINT DF_Processes_vtail DEFAULT (0);
-- The few processes with a concurrency cap (the claim asks whether any exists),
-- and the unfinished ones (the rescue pass looks for stages left behind).
CREATE NONCLUSTERED INDEX IX_Processes_Capped ON stageq.Processes (id) WHERE max_parallel IS NOT NULL;
CREATE NONCLUSTERED INDEX IX_Processes_Open ON stageq.Processes (id) WHERE state IN ('active', 'failed');

-- Tasks: a virtual time, the process's priority copied so that the claim is one
-- index seek, and the 'scheduled' state.
ALTER TABLE stageq.Tasks ADD vtime bigint NOT NULL CONSTRAINT DF_Tasks_vtime DEFAULT (0);
ALTER TABLE stageq.Tasks ADD process_priority int NOT NULL CONSTRAINT DF_Tasks_process_priority DEFAULT (0);
ALTER TABLE stageq.Tasks DROP CONSTRAINT CK_Tasks_state;
-- A new constraint is checked against the existing rows by default (WITH CHECK).
-- https://learn.microsoft.com/sql/t-sql/statements/alter-table-transact-sql
ALTER TABLE stageq.Tasks ADD CONSTRAINT CK_Tasks_state
    CHECK (state IN ('blocked', 'scheduled', 'available', 'running', 'failed'));

-- Fewer indexes per state change. A claim moves a row from IX_Tasks_Claim to
-- IX_Tasks_Running and IX_Tasks_RunningLimit; a
-- successful completion deletes it from those and from IX_Tasks_Stage, the one
-- index of every task by process (the barrier, and the foreign key's check).
-- Lease extension changes lease_expires_at, which no index holds.
DROP INDEX IX_Tasks_ClaimProcess ON stageq.Tasks;
DROP INDEX IX_Tasks_Ready ON stageq.Tasks;
DROP INDEX IX_Tasks_Lease ON stageq.Tasks;
DROP INDEX IX_Tasks_Worker ON stageq.Tasks;
DROP INDEX IX_Tasks_RunningLimit ON stageq.Tasks;
DROP INDEX IX_Tasks_RunningKind ON stageq.Tasks;
EXEC (N'CREATE NONCLUSTERED INDEX IX_Tasks_Claim ON stageq.Tasks (process_priority DESC, vtime, id) WHERE state = ''available'';');
CREATE NONCLUSTERED INDEX IX_Tasks_Due ON stageq.Tasks (run_at) WHERE state = 'scheduled';
CREATE NONCLUSTERED INDEX IX_Tasks_Blocked ON stageq.Tasks (process_id, execution_order) WHERE state = 'blocked';
CREATE NONCLUSTERED INDEX IX_Tasks_Failed ON stageq.Tasks (process_id) WHERE state = 'failed';
-- Running tasks, by process: max_parallel counts them; rescue, kind limits and
-- worker listings read them all, which is bounded by the cluster's concurrency.
-- kind and worker_id never change while a task runs, so including them costs no
-- write that the claim does not already make.
CREATE NONCLUSTERED INDEX IX_Tasks_Running ON stageq.Tasks (process_id) INCLUDE (kind, worker_id) WHERE state = 'running';
-- Filtered on state alone: a hinted index must be matched by the query's own
-- predicate, and 'limit_key = @Key' is not 'limit_key IS NOT NULL' as written.
CREATE NONCLUSTERED INDEX IX_Tasks_RunningLimit ON stageq.Tasks (limit_key) WHERE state = 'running';

-- Logs: the claim inserts a row per attempt; a schedule's index holds only the
-- rows a schedule enqueued.
DROP INDEX IX_Logs_Schedule ON stageq.Logs;
CREATE NONCLUSTERED INDEX IX_Logs_Schedule ON stageq.Logs (schedule_name, scheduled_for) WHERE schedule_name IS NOT NULL;

-- Replaced by stageq.OpenStage's own checks and the virtual times.
DROP PROCEDURE stageq.RefreshProcess;

-- stageq.VNow: the current virtual time of priority @Priority: the virtual time
-- of the next task a claim would take at that priority, or the clock when none
-- is available. The head is read with READPAST: a task another claim is taking
-- right now is no longer the head. The clock is read with NEXT VALUE FOR, which
-- also moves it on by one (a thousandth of the smallest stride; harmless), and
-- NEXT VALUE FOR cannot appear inside COALESCE or CASE, hence the IF.
-- https://learn.microsoft.com/sql/t-sql/functions/next-value-for-transact-sql
EXEC (N'
CREATE PROCEDURE stageq.VNow
    @Priority int,
    @VNow     bigint = NULL OUTPUT
AS
BEGIN
    SET NOCOUNT ON;
    SET @VNow = NULL;
    SELECT TOP (1) @VNow = h.vtime
      FROM stageq.Tasks AS h WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Tasks_Claim))
     WHERE h.state = ''available'' AND h.process_priority = @Priority
     ORDER BY h.process_priority DESC, h.vtime, h.id;
    IF @VNow IS NULL
        SET @VNow = NEXT VALUE FOR stageq.VClock;
    RETURN 0;
END;
');

-- stageq.StampDone records that a process's tasks were stamped up to @VTail:
-- its vtail, and the clock, which must never be behind the newest stamp. The
-- caller holds the process row. A sequence only moves forward by handing out
-- values, so the clock is raised by taking a range of the missing size with
-- sys.sp_sequence_get_range (no row lock, not rolled back: the clock never goes
-- back, and two sessions raising it at once only overshoot, which delays a
-- newcomer by at most one of their strides).
-- https://learn.microsoft.com/sql/relational-databases/system-stored-procedures/sp-sequence-get-range-transact-sql
EXEC (N'
CREATE PROCEDURE stageq.StampDone
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
        EXEC sys.sp_sequence_get_range @sequence_name = N''stageq.VClock'', @range_size = @Size,
             @range_first_value = @First OUTPUT;
    END;
    RETURN 0;
END;
');

-- stageq.OpenStage re-derives which tasks of a process may run: the blocked
-- tasks of its lowest order become available (or scheduled, when their run_at
-- lies ahead), stamped with their virtual times in their own priority order;
-- a stage that was open above a lower order that arrived, or of a paused
-- process, is blocked again. The caller holds the process row's update lock
-- (Submit, AdvanceProcess, Rescue, the operator's commands). Every statement is
-- a seek on IX_Tasks_Stage or IX_Tasks_Blocked; when nothing changes, that is
-- two seeks and no write.
--
-- Writes go 1,000 tasks per statement: SQL Server attempts to escalate to a
-- table lock once one statement holds 5,000 locks on one index, and READPAST
-- passes over locked rows, never over a locked table. The order in which a
-- stage's tasks take their turns is fixed once, in @Open (identity values follow
-- INSERT ... SELECT ... ORDER BY), so each chunk continues the numbering.
-- https://learn.microsoft.com/sql/relational-databases/sql-server-transaction-locking-and-row-versioning-guide#lock-escalation
-- https://learn.microsoft.com/sql/t-sql/statements/insert-transact-sql
EXEC (N'
ALTER PROCEDURE stageq.OpenStage
    @ProcessId bigint
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

    DECLARE @Old int, @New int, @Paused bit, @Weight int, @Priority int, @Failed int,
            @State varchar(20), @Finished datetime2(7), @VTail bigint, @NewState varchar(20),
            @Now datetime2(7) = SYSUTCDATETIME(), @Base bigint, @Stride bigint, @Opened bigint = 0,
            @ChunkStart bigint, @ChunkEnd bigint, @Batch int, @Tail bigint;
    DECLARE @Open TABLE (seq bigint IDENTITY(1, 1) NOT NULL PRIMARY KEY, id bigint NOT NULL);

    -- Already locked by the caller; asking again is free.
    SELECT @Old = p.current_order, @Paused = p.paused, @Weight = p.weight, @Priority = p.priority,
           @Failed = p.failed_tasks, @State = p.state, @Finished = p.finished_at, @VTail = p.vtail
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
        -- No task left: done. failed_tasks is necessarily 0 (failed tasks stay in
        -- the table); resetting it heals any drift.
        UPDATE stageq.Processes
           SET current_order = NULL, state = ''succeeded'', failed_tasks = 0, updated_at = @Now, finished_at = @Now
         WHERE id = @ProcessId AND state IN (''active'', ''failed'');
        RETURN 0;
    END;

    -- Only the open stage can hold available or scheduled tasks.
    IF @Old IS NOT NULL AND (@Paused = 1 OR @New < @Old)
    BEGIN
        WHILE 1 = 1
        BEGIN
            UPDATE TOP (1000) t
               SET state = ''blocked''
              FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(IX_Tasks_Stage))
             WHERE t.process_id = @ProcessId AND t.execution_order = @Old
               AND t.state IN (''available'', ''scheduled'');
            IF @@ROWCOUNT < 1000
                BREAK;
        END;
    END;

    IF @Paused = 0
    BEGIN
        INSERT INTO @Open (id)
        SELECT b.id
          FROM stageq.Tasks AS b WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Blocked))
         WHERE b.process_id = @ProcessId AND b.execution_order = @New AND b.state = ''blocked''
         ORDER BY b.priority DESC, b.run_at, b.id;
        SET @Opened = @@ROWCOUNT;
        IF @Opened > 0
        BEGIN
            -- Turns start at the current virtual time of the process''s priority,
            -- or after its own tasks still stamped ahead of it.
            SET @Stride = 1000000 / @Weight;
            EXEC stageq.VNow @Priority = @Priority, @VNow = @Base OUTPUT;
            IF @VTail > @Base
                SET @Base = @VTail;
            SET @ChunkStart = 0;
            WHILE @ChunkStart < @Opened
            BEGIN
                SET @ChunkEnd = @ChunkStart + 1000;
                UPDATE t
                   SET state = CASE WHEN t.run_at > @Now THEN ''scheduled'' ELSE ''available'' END,
                       vtime = @Base + (o.seq - 1) * @Stride,
                       process_priority = @Priority
                  FROM stageq.Tasks AS t WITH (ROWLOCK, FORCESEEK)
                  JOIN @Open AS o ON o.id = t.id
                 WHERE o.seq > @ChunkStart AND o.seq <= @ChunkEnd AND t.state = ''blocked'';
                SET @ChunkStart = @ChunkEnd;
            END;
            SET @Tail = @Base + @Opened * @Stride;
            EXEC stageq.StampDone @ProcessId = @ProcessId, @VTail = @Tail;
        END;
    END;

    SET @NewState = CASE WHEN @Failed > 0 THEN ''failed'' ELSE ''active'' END;
    IF @Old IS NULL OR @Old <> @New OR @State <> @NewState OR @Finished IS NOT NULL
        UPDATE stageq.Processes
           SET current_order = @New, state = @NewState, updated_at = @Now, finished_at = NULL
         WHERE id = @ProcessId;
    RETURN 0;
END;
');

-- stageq.Configure changes a process's scheduling; the caller holds its row.
-- @Priority, @Weight, @MaxParallel are NULL to keep them; @MaxParallel 0 removes
-- the cap. A new priority reaches the tasks already waiting (the claim orders by
-- their copy of it, process_priority); a new weight re-spaces the turns of the
-- tasks already stamped, from the earliest of them, so that a plan's weight
-- applies to its own tasks. 1,000 tasks per statement (lock escalation).
EXEC (N'
CREATE PROCEDURE stageq.Configure
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
           AND t.state IN (''available'', ''scheduled'')
         ORDER BY t.vtime, t.id;
        SET @Stamped = @@ROWCOUNT;
        IF @Stamped > 0
        BEGIN
            SELECT @Base = MIN(t.vtime)
              FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Stage))
             WHERE t.process_id = @ProcessId AND t.execution_order = @Cur
               AND t.state IN (''available'', ''scheduled'');
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
');

-- stageq.Submit: as in migration 1 (validation, the process row locked first,
-- tasks inserted 1,000 per statement), except that every task arrives blocked
-- and OpenStage opens the lowest stage with its virtual times, and that the
-- scheduling settings go through stageq.Configure.
EXEC (N'
ALTER PROCEDURE stageq.Submit
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
        THROW 50001, N''stageq: process name must not be empty'', 1;
    IF DATALENGTH(@Process) > 400
        THROW 50001, N''stageq: process name is longer than 200 characters'', 1;
    IF @Weight IS NOT NULL AND (@Weight < 1 OR @Weight > 1000)
        THROW 50001, N''stageq: weight must be between 1 and 1000'', 1;
    IF @MaxParallel IS NOT NULL AND @MaxParallel < 0
        THROW 50001, N''stageq: max_parallel must be >= 1 (or 0 for no cap)'', 1;
    SET @Name = @Process;

    IF @Tasks IS NULL OR ISJSON(@Tasks) <> 1
        THROW 50002, N''stageq: tasks must be a JSON array of task objects'', 1;
    -- OPENJSON over an array yields keys 0..n-1, and type 5 for objects.
    IF EXISTS (SELECT 1 FROM OPENJSON(@Tasks) AS e WHERE e.[type] <> 5 OR TRY_CONVERT(int, e.[key]) IS NULL)
        THROW 50002, N''stageq: tasks must be a JSON array of task objects'', 1;
    IF NOT EXISTS (SELECT 1 FROM OPENJSON(@Tasks))
        THROW 50002, N''stageq: a submission needs at least one task'', 1;

    INSERT INTO @Raw (ord, order_type, execution_order, kind, body, max_attempts, priority, atomic,
                      run_at, delay_ms, limit_key)
    SELECT CONVERT(int, e.[key]) + 1,
           (SELECT p.[type] FROM OPENJSON(e.[value]) AS p WHERE p.[key] = N''execution_order''),
           j.execution_order, j.kind, j.body, j.max_attempts, j.priority, j.atomic, j.run_at,
           j.delay_ms, j.limit_key
      FROM OPENJSON(@Tasks) AS e
     CROSS APPLY OPENJSON(e.[value]) WITH (
           execution_order nvarchar(max) ''$.execution_order'',
           kind            nvarchar(max) ''$.kind'',
           body            nvarchar(max) ''$.body'',
           max_attempts    nvarchar(max) ''$.max_attempts'',
           priority        nvarchar(max) ''$.priority'',
           atomic          nvarchar(max) ''$.atomic'',
           run_at          nvarchar(max) ''$.run_at'',
           delay_ms        nvarchar(max) ''$.delay_ms'',
           limit_key       nvarchar(max) ''$.limit_key'') AS j;

    SELECT TOP (1) @Bad = r.ord, @Problem = c.problem
      FROM @Raw AS r
     CROSS APPLY (SELECT CASE
           WHEN r.order_type IS NULL OR r.order_type <> 2
                OR TRY_CONVERT(int, r.execution_order) IS NULL OR TRY_CONVERT(int, r.execution_order) < 0
               THEN N''execution_order must be a whole number from 0 to 2147483647''
           WHEN r.body IS NULL OR DATALENGTH(r.body) = 0
               THEN N''body must not be empty''
           WHEN r.kind IS NOT NULL AND (DATALENGTH(r.kind) = 0 OR DATALENGTH(r.kind) > 400)
               THEN N''kind must be 1 to 200 characters''
           WHEN r.max_attempts IS NOT NULL AND (TRY_CONVERT(int, r.max_attempts) IS NULL OR TRY_CONVERT(int, r.max_attempts) < 1)
               THEN N''max_attempts must be a whole number >= 1''
           WHEN r.priority IS NOT NULL AND TRY_CONVERT(int, r.priority) IS NULL
               THEN N''priority must be a whole number''
           WHEN r.atomic IS NOT NULL AND r.atomic NOT IN (N''true'', N''false'')
               THEN N''atomic must be true or false''
           WHEN r.run_at IS NOT NULL AND TRY_CONVERT(datetimeoffset(7), r.run_at) IS NULL
               THEN N''run_at must be an ISO 8601 time such as 2024-05-01T10:00:00Z''
           WHEN r.delay_ms IS NOT NULL AND (TRY_CONVERT(bigint, r.delay_ms) IS NULL
                OR TRY_CONVERT(bigint, r.delay_ms) < 0 OR TRY_CONVERT(bigint, r.delay_ms) > 315360000000)
               THEN N''delay_ms must be a whole number from 0 to 315360000000 (ten years)''
           WHEN r.limit_key IS NOT NULL AND (DATALENGTH(r.limit_key) = 0 OR DATALENGTH(r.limit_key) > 400)
               THEN N''limit_key must be 1 to 200 characters''
           END AS problem) AS c
     WHERE c.problem IS NOT NULL
     ORDER BY r.ord;
    IF @Bad IS NOT NULL
    BEGIN
        -- No user text goes into the message, so nothing needs escaping for THROW.
        SET @Msg = CONCAT(N''stageq: task '', @Bad, N'' is invalid: '', @Problem);
        THROW 50003, @Msg, 1;
    END;

    BEGIN TRY
        BEGIN TRANSACTION;

        -- The process row''s update lock serialises every change of a process: it is
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
            EXEC stageq.Configure @ProcessId = @ProcessId, @Priority = @Priority, @Weight = @Weight,
                 @MaxParallel = @MaxParallel;
        SELECT @ProcPriority = p.priority
          FROM stageq.Processes AS p WITH (UPDLOCK, ROWLOCK, INDEX(PK_Processes))
         WHERE p.id = @ProcessId;

        -- Every task arrives blocked; OpenStage then opens the lowest stage,
        -- stamping its tasks'' turns (virtual times) in their priority order, and
        -- blocks again a started stage above a new lower one.
        -- Inserted 1,000 at a time (r.ord is 1..n): SQL Server tries to escalate to
        -- a table lock, which every claim''s READPAST would wait for, once one
        -- statement holds 5,000 locks on one index. All chunks are one transaction.
        SELECT @Last = MAX(r.ord) FROM @Raw AS r;
        SET @ChunkStart = 1;
        WHILE @ChunkStart <= @Last
        BEGIN
            SET @ChunkEnd = @ChunkStart + 999;
            INSERT INTO stageq.Tasks (process_id, process_name, execution_order, kind, body, state,
                                      priority, max_attempts, atomic, run_at, limit_key, process_priority)
            OUTPUT inserted.id INTO @Ids (id)
            SELECT @ProcessId, @Name, o.execution_order, COALESCE(r.kind, N''sql''), r.body,
                   ''blocked'',
                   COALESCE(TRY_CONVERT(int, r.priority), 0),
                   COALESCE(TRY_CONVERT(int, r.max_attempts), 3),
                   CASE WHEN r.atomic = N''true'' THEN 1 ELSE 0 END,
                   COALESCE(CONVERT(datetime2(7), SWITCHOFFSET(TRY_CONVERT(datetimeoffset(7), r.run_at), ''+00:00'')),
                            DATEADD(millisecond, CONVERT(int, COALESCE(TRY_CONVERT(bigint, r.delay_ms), 0) % 1000),
                                    DATEADD(second, CONVERT(int, COALESCE(TRY_CONVERT(bigint, r.delay_ms), 0) / 1000), @Now))),
                   r.limit_key, @ProcPriority
              FROM @Raw AS r
             CROSS APPLY (SELECT TRY_CONVERT(int, r.execution_order) AS execution_order) AS o
             WHERE r.ord >= @ChunkStart AND r.ord <= @ChunkEnd
             ORDER BY r.ord;
            SET @ChunkStart = @ChunkEnd + 1;
        END;

        EXEC stageq.OpenStage @ProcessId = @ProcessId;

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
');

-- stageq.Claim leases up to @Max tasks (at most 1,000) to @WorkerId with lease
-- token @Token for @LeaseMs, writes their Logs rows and returns them, in one
-- transaction. It locks no shared row on its fast path.
--
-- 1. Scheduled tasks that are due (at most 1,000) become available, stamped from
--    the current virtual time of their priority: a process's delayed tasks take
--    turns with the others instead of arriving as a burst.
-- 2. No limit row and no capped process: each priority level is served by ONE
--    statement, an UPDATE of the head of IX_Tasks_Claim (process priority, then
--    virtual time) read with UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK and
--    written through OUTPUT into @Claimed. TOP with ORDER BY sits in the CTE that
--    the UPDATE targets, because UPDATE TOP (n) alone takes arbitrary rows
--    ("UPDATE (Transact-SQL)", Limiting Updated Data by Using TOP). Rows that
--    other claims hold are passed over, never waited for; the lock that reads a
--    row is the lock that updates it, so two claims can never take one row.
--    A lower priority is served only when the higher one has nothing this claim
--    could take (rows another claim holds are that claim's).
-- 3. Otherwise the gated path: candidates in claim order, each locked alone and
--    admitted when its capped process's row and each limit row that applies can be
--    locked (READPAST: held elsewhere counts as full) and their running tasks,
--    counted after the lock, leave a slot. A candidate that is refused loses its
--    turn (its virtual time goes behind the current one); further candidates of a
--    full process, limit or kind are skipped in this claim.
--
-- Lock order: process row, then limit rows, then task rows; this claim takes
-- process and limit rows only with READPAST, so it never waits while it holds a
-- task lock. READ COMMITTED plus READCOMMITTEDLOCK keep READPAST legal and the
-- reads locking on databases with READ_COMMITTED_SNAPSHOT on. At most about four
-- locks per task per statement (clustered row, IX_Tasks_Claim, IX_Tasks_Running,
-- IX_Tasks_RunningLimit), under 4,000 at 1,000 tasks: below lock escalation.
-- https://learn.microsoft.com/sql/t-sql/queries/hints-transact-sql-table
-- https://learn.microsoft.com/sql/t-sql/queries/update-transact-sql
-- https://learn.microsoft.com/sql/t-sql/queries/output-clause-transact-sql
EXEC (N'
ALTER PROCEDURE stageq.Claim
    @Max      int,
    @WorkerId nvarchar(200),
    @Token    bigint,
    @LeaseMs  int
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
    DECLARE @FullLimit TABLE ([key] nvarchar(200) NOT NULL PRIMARY KEY);
    DECLARE @FullKind TABLE (kind nvarchar(200) NOT NULL PRIMARY KEY);

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

-- stageq.FinishMany ends many attempts in one transaction. @Results is a JSON
-- array (at most 1,000) of {"id": task id, "token": lease token, "outcome":
-- "succeeded" | "failed" | "released", "error": text, "retry_ms": ms}; with
-- "failed", retry_ms > 0 schedules another attempt and 0 fails the task for good.
-- Each result is fenced by its token: one whose token no longer holds its task
-- changes nothing. Returns, unless @ResultSet = 0, a row (task_id, NULL) per
-- attempt recorded and a row (NULL, advance_process_id) per process whose
-- current stage this batch may have ended: the caller passes those to
-- stageq.Advance after this transaction committed. @Held: attempts recorded.
--
-- Succeeded tasks are deleted and their Logs rows closed, and nothing else: no
-- process row is locked or read with a lock that waits (the hot path). Tasks
-- handed back (a retry, a release) or failed for good lock their process rows
-- first, one statement per row in id order as every writer does, so that a
-- lower order submitted meanwhile cannot be missed and a final failure marks
-- its process failed in the same transaction. Those are the exceptions.
--
-- Whether a stage may have ended is read past held rows (READPAST): a task of
-- the stage that another transaction holds is being claimed or finished there,
-- so skipping it can only add a process to the answer, never leave one out, and
-- stageq.Advance decides again under the process lock. Whoever commits the last
-- task of a stage then sees it empty: of two completions racing for a stage's
-- last two tasks, the one that commits last sees none left.
-- https://learn.microsoft.com/sql/t-sql/functions/openjson-transact-sql
-- https://learn.microsoft.com/sql/t-sql/queries/output-clause-transact-sql
EXEC (N'
CREATE PROCEDURE stageq.FinishMany
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

-- stageq.Finish ends one attempt, as stageq.FinishMany ends many, in the
-- caller's transaction when there is one (an atomic task finishes in the
-- transaction that ran its body). @Held = 0, with nothing changed, when the token
-- no longer holds the task. It does not move the process to its next stage: the
-- caller passes the task's process to stageq.Advance once it has committed.
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

-- stageq.AdvanceProcess is the second half of a completion, run after it
-- committed: if the process's current stage has no task left (or it has a task
-- failed for good and does not say so yet), OpenStage re-derives its stage under
-- the process lock, in a short transaction. Idempotent. It never waits for a
-- lock: SET LOCK_TIMEOUT 0 turns every wait into error 1222, caught here.
--
-- * The process row held elsewhere (a submission still open, say): @Busy = 1,
--   for the caller to try again shortly.
-- * A task of the stage held elsewhere: a claim is taking it, or a completion
--   deleting it has not committed yet. Either way the stage is not over for this
--   caller, and that completion advances the process after its own commit: of two
--   completions racing for a stage's last two tasks, the one that commits last
--   finds the stage empty. Nothing to do, not busy.
-- The two checks run before the transaction (XACT_ABORT ON dooms a transaction on
-- error 1222, but outside one only the statement fails), so this procedure must
-- be called outside a transaction.
-- https://learn.microsoft.com/sql/t-sql/statements/set-lock-timeout-transact-sql
-- https://learn.microsoft.com/sql/t-sql/language-elements/try-catch-transact-sql
EXEC (N'
CREATE PROCEDURE stageq.AdvanceProcess
    @ProcessId bigint,
    @Busy      bit = 0 OUTPUT
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

    DECLARE @Lock bigint, @Cur int, @State varchar(20), @Failed int, @Left bit = 0;
    SET @Busy = 0;
    IF @@TRANCOUNT > 0
        THROW 50031, N''stageq: a stage advance runs outside any transaction'', 1;
    SET LOCK_TIMEOUT 0;

    BEGIN TRY
        SELECT @Lock = p.id, @Cur = p.current_order, @State = p.state, @Failed = p.failed_tasks
          FROM stageq.Processes AS p WITH (READCOMMITTEDLOCK, INDEX(PK_Processes))
         WHERE p.id = @ProcessId;
    END TRY
    BEGIN CATCH
        IF ERROR_NUMBER() <> 1222 THROW;
        SET @Busy = 1;
        RETURN 0;
    END CATCH;
    IF @Lock IS NULL OR @State NOT IN (''active'', ''failed'')
        RETURN 0;

    IF @Cur IS NOT NULL AND NOT (@State = ''active'' AND @Failed > 0)
    BEGIN
        BEGIN TRY
            IF EXISTS (SELECT 1 FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Stage))
                        WHERE t.process_id = @ProcessId AND t.execution_order = @Cur)
                SET @Left = 1;
        END TRY
        BEGIN CATCH
            IF ERROR_NUMBER() <> 1222 THROW;
            SET @Left = 1; -- held by a claim or an uncommitted completion: see above
        END CATCH;
        IF @Left = 1
            RETURN 0;
    END;

    BEGIN TRY
        BEGIN TRANSACTION;
        SET @Lock = NULL;
        SELECT @Lock = p.id
          FROM stageq.Processes AS p WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK, INDEX(PK_Processes))
         WHERE p.id = @ProcessId;
        IF @Lock IS NULL
            SET @Busy = 1;
        ELSE
            EXEC stageq.OpenStage @ProcessId = @ProcessId;
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
        IF ERROR_NUMBER() <> 1222 THROW;
        SET @Busy = 1; -- a row the stage needs is held for now
    END CATCH;
    RETURN 0;
END;
');

-- stageq.Advance runs stageq.AdvanceProcess for each process id of @Ids (a JSON
-- array of numbers), in id order, and returns the ids whose row another
-- transaction held (one column, id), to try again shortly.
EXEC (N'
CREATE PROCEDURE stageq.Advance
    @Ids nvarchar(max)
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;

    DECLARE @Pid bigint = 0, @Busy bit;
    DECLARE @Todo TABLE (id bigint NOT NULL PRIMARY KEY);
    DECLARE @Waiting TABLE (id bigint NOT NULL PRIMARY KEY);

    IF @Ids IS NULL OR ISJSON(@Ids) <> 1
        THROW 50004, N''stageq: process ids must be a JSON array of numbers'', 1;
    INSERT INTO @Todo (id)
    SELECT DISTINCT TRY_CONVERT(bigint, j.[value])
      FROM OPENJSON(@Ids) AS j
     WHERE TRY_CONVERT(bigint, j.[value]) IS NOT NULL;

    WHILE 1 = 1
    BEGIN
        SELECT TOP (1) @Pid = d.id FROM @Todo AS d WHERE d.id > @Pid ORDER BY d.id;
        IF @@ROWCOUNT = 0
            BREAK;
        SET @Busy = 0;
        EXEC stageq.AdvanceProcess @ProcessId = @Pid, @Busy = @Busy OUTPUT;
        IF @Busy = 1
            INSERT INTO @Waiting (id) VALUES (@Pid);
    END;

    SELECT w.id FROM @Waiting AS w ORDER BY w.id;
    RETURN 0;
END;
');

-- stageq.Rescue returns up to @Max tasks whose lease expired to the queue, or
-- fails them when they are out of attempts, and closes their Logs rows as
-- abandoned; then it repairs up to @Max processes whose stage ended without being
-- advanced (a worker died between a completion and its stageq.Advance). Each
-- task, and each repair, is a transaction of its own: a pass holds one process
-- lock at a time and a handful of row locks, far below lock escalation. Process
-- rows are taken with READPAST: a process busy elsewhere is rescued by a later
-- pass, and a rescue never waits for one.
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

COMMIT TRANSACTION;
