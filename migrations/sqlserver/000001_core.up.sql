-- stageq schema for SQL Server 2016 or later (database compatibility level 130+,
-- for OPENJSON). docs/sqlserver.md explains every lock these objects take; NOTHING
-- HERE HAS BEEN RUN AGAINST A REAL SQL SERVER YET (see that page).
--
-- Tables: stageq.Processes, stageq.Tasks, stageq.Logs, stageq.Workers,
-- stageq.Limits, stageq.Schedules, stageq.ScheduleRuns, stageq.ExclusiveLeases.
-- Procedures: stageq.RefreshProcess, stageq.OpenStage, stageq.Submit,
-- stageq.Enqueue, stageq.Claim, stageq.Finish, stageq.Rescue.
--
-- Versions. Every dialect's schema is one baseline version, 000001, until stageq
-- has a release whose databases later versions must upgrade.
--
-- How this file is run: golang-migrate's sqlserver driver sends it as ONE batch
-- (no GO separators), after migrations.go created schema stageq. CREATE PROCEDURE
-- must be the first statement of a batch, so each procedure is created by a
-- dynamic batch of its own, EXEC (N'CREATE PROCEDURE ...'); inside those literals
-- a quote is written twice ('' for '). The whole file is one transaction (DDL is
-- transactional in SQL Server): a failure leaves nothing half built.
--
-- Column names are snake_case as in the PostgreSQL and SQLite schemas, so that a
-- query or a runbook reads the same on every dialect. Times are datetime2(7) in UTC
-- from SYSUTCDATETIME(): the database's clock decides every lease and tick.

SET XACT_ABORT ON;
-- Procedures keep the ANSI_NULLS and QUOTED_IDENTIFIER settings in force when they
-- are created: pin them rather than inherit the migrating session's.
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;

BEGIN TRANSACTION;

-- Names compare in a binary collation, so 'Nightly' and 'nightly' are two
-- processes, as on PostgreSQL and SQLite.
CREATE TABLE stageq.Processes (
    id            bigint IDENTITY(1, 1) NOT NULL,
    name          nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    state         varchar(20)  NOT NULL CONSTRAINT DF_Processes_state DEFAULT ('active'),
    -- The lowest execution_order that still has tasks; NULL when the process has
    -- none. Only tasks of this order are 'available'; higher ones wait 'blocked'.
    current_order int          NULL,
    -- Tasks of this process in state 'failed', kept under the process lock by
    -- Finish and Rescue so that the barrier never reads task rows other sessions
    -- hold (docs/sqlserver.md, "Lock order").
    failed_tasks  int          NOT NULL CONSTRAINT DF_Processes_failed_tasks DEFAULT (0),
    -- Scheduling: higher priority first; weight is the share among equals.
    priority      int          NOT NULL CONSTRAINT DF_Processes_priority DEFAULT (0),
    weight        int          NOT NULL CONSTRAINT DF_Processes_weight DEFAULT (1),
    max_parallel  int          NULL,
    paused        bit          NOT NULL CONSTRAINT DF_Processes_paused DEFAULT (0),
    -- Stride scheduling's virtual time: the runnable process with the lowest pass
    -- (within the highest priority) is served next, then pass += 1000000 / weight.
    pass          bigint       NOT NULL CONSTRAINT DF_Processes_pass DEFAULT (0),
    -- Kept by stageq.RefreshProcess under the process lock: 1 when the process has
    -- an available task, is not paused and runs fewer than max_parallel tasks.
    runnable      bit          NOT NULL CONSTRAINT DF_Processes_runnable DEFAULT (0),
    -- The earliest run_at among its available tasks.
    ready_at      datetime2(7) NULL,
    created_at    datetime2(7) NOT NULL CONSTRAINT DF_Processes_created_at DEFAULT (SYSUTCDATETIME()),
    updated_at    datetime2(7) NOT NULL CONSTRAINT DF_Processes_updated_at DEFAULT (SYSUTCDATETIME()),
    finished_at   datetime2(7) NULL,
    CONSTRAINT PK_Processes PRIMARY KEY CLUSTERED (id),
    CONSTRAINT UQ_Processes_name UNIQUE (name),
    CONSTRAINT CK_Processes_name CHECK (DATALENGTH(name) > 0),
    CONSTRAINT CK_Processes_state CHECK (state IN ('active', 'succeeded', 'failed')),
    CONSTRAINT CK_Processes_failed_tasks CHECK (failed_tasks >= 0),
    CONSTRAINT CK_Processes_weight CHECK (weight BETWEEN 1 AND 1000),
    CONSTRAINT CK_Processes_max_parallel CHECK (max_parallel >= 1)
);

-- The run queue: a claim seeks runnable processes in service order. Idle, blocked,
-- paused and capped processes sort under runnable = 0 and are never read.
CREATE NONCLUSTERED INDEX IX_Processes_Queue ON stageq.Processes (runnable, priority DESC, pass, id)
    INCLUDE (ready_at);
-- The run queue's virtual time (lowest pass), for a process that wakes up.
CREATE NONCLUSTERED INDEX IX_Processes_VTime ON stageq.Processes (runnable, pass);

-- The default process holds nothing yet: it has nothing left to do.
INSERT INTO stageq.Processes (name, state) VALUES (N'default', N'succeeded');

-- The hot table: only unfinished tasks. A task that succeeds leaves it; history
-- stays in Logs. process_name is a copy of the (immutable) process name, so that
-- writing a Logs row never reads stageq.Processes.
CREATE TABLE stageq.Tasks (
    id               bigint IDENTITY(1, 1) NOT NULL,
    process_id       bigint        NOT NULL,
    process_name     nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    execution_order  int           NOT NULL,
    kind             nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL CONSTRAINT DF_Tasks_kind DEFAULT (N'sql'),
    body             nvarchar(max) NOT NULL,
    state            varchar(20)   NOT NULL,
    priority         int           NOT NULL CONSTRAINT DF_Tasks_priority DEFAULT (0),
    attempt          int           NOT NULL CONSTRAINT DF_Tasks_attempt DEFAULT (0),
    max_attempts     int           NOT NULL CONSTRAINT DF_Tasks_max_attempts DEFAULT (3),
    atomic           bit           NOT NULL CONSTRAINT DF_Tasks_atomic DEFAULT (0),
    run_at           datetime2(7)  NOT NULL CONSTRAINT DF_Tasks_run_at DEFAULT (SYSUTCDATETIME()),
    worker_id        nvarchar(200) COLLATE Latin1_General_100_BIN2 NULL,
    lease_token      bigint        NULL,
    lease_expires_at datetime2(7)  NULL,
    last_error       nvarchar(max) NULL,
    limit_key        nvarchar(200) COLLATE Latin1_General_100_BIN2 NULL,
    schedule_name    nvarchar(200) COLLATE Latin1_General_100_BIN2 NULL,
    scheduled_for    datetime2(7)  NULL,
    created_at       datetime2(7)  NOT NULL CONSTRAINT DF_Tasks_created_at DEFAULT (SYSUTCDATETIME()),
    CONSTRAINT PK_Tasks PRIMARY KEY CLUSTERED (id),
    CONSTRAINT FK_Tasks_Processes FOREIGN KEY (process_id) REFERENCES stageq.Processes (id),
    CONSTRAINT CK_Tasks_execution_order CHECK (execution_order >= 0),
    CONSTRAINT CK_Tasks_kind CHECK (DATALENGTH(kind) > 0),
    CONSTRAINT CK_Tasks_body CHECK (DATALENGTH(body) > 0),
    CONSTRAINT CK_Tasks_state CHECK (state IN ('blocked', 'available', 'running', 'failed')),
    CONSTRAINT CK_Tasks_max_attempts CHECK (max_attempts >= 1),
    CONSTRAINT CK_Tasks_limit_key CHECK (DATALENGTH(limit_key) > 0)
);

-- The claim, inside one locked process: a seek to (process, 'available') already in
-- claim order. Blocked, running and failed tasks sort under other states and are
-- never read. No filtered indexes anywhere: DML on a table with a filtered index
-- fails unless every session has the exact SET options filtered indexes need.
CREATE NONCLUSTERED INDEX IX_Tasks_ClaimProcess ON stageq.Tasks (process_id, state, priority DESC, run_at, id);
-- A process's earliest available run_at (ready_at) and its running count
-- (max_parallel), both seeks on (process_id, state).
CREATE NONCLUSTERED INDEX IX_Tasks_Ready ON stageq.Tasks (process_id, state, run_at);
-- The barrier: the lowest order left in a process, and the tasks of one stage.
-- Claims and lease extensions never change these key columns, so they never hold
-- locks on entries of this index.
CREATE NONCLUSTERED INDEX IX_Tasks_Stage ON stageq.Tasks (process_id, execution_order);
-- Rescue: running tasks by lease expiry.
CREATE NONCLUSTERED INDEX IX_Tasks_Lease ON stageq.Tasks (state, lease_expires_at);
-- A worker's running tasks: lease extension, and the path by which Finish and
-- Rescue reach a task row, so all three lock this index before the clustered row.
CREATE NONCLUSTERED INDEX IX_Tasks_Worker ON stageq.Tasks (worker_id, state);
-- Slots in use: running tasks per limit key and per kind. Lease extension never
-- changes these keys, so a slot count never waits for an extension.
CREATE NONCLUSTERED INDEX IX_Tasks_RunningLimit ON stageq.Tasks (limit_key, state);
CREATE NONCLUSTERED INDEX IX_Tasks_RunningKind ON stageq.Tasks (kind, state);
-- A singleton schedule asks whether any task of an earlier run is still queued.
CREATE NONCLUSTERED INDEX IX_Tasks_Schedule ON stageq.Tasks (schedule_name);

-- One row per attempt, written when it starts (by the claim) and completed when it
-- ends, never in the task's own transaction. No foreign key, no trigger: the audit
-- trail outlives the task.
CREATE TABLE stageq.Logs (
    id              bigint IDENTITY(1, 1) NOT NULL,
    task_id         bigint        NOT NULL,
    process_id      bigint        NOT NULL,
    process_name    nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    execution_order int           NOT NULL,
    kind            nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    body            nvarchar(max) NOT NULL,
    worker_id       nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    attempt         int           NOT NULL,
    lease_token     bigint        NOT NULL,
    started_at      datetime2(7)  NOT NULL CONSTRAINT DF_Logs_started_at DEFAULT (SYSUTCDATETIME()),
    ended_at        datetime2(7)  NULL,
    duration_ms     bigint        NULL,
    outcome         varchar(20)   NOT NULL CONSTRAINT DF_Logs_outcome DEFAULT ('running'),
    error           nvarchar(max) NULL,
    retry_at        datetime2(7)  NULL,
    schedule_name   nvarchar(200) COLLATE Latin1_General_100_BIN2 NULL,
    scheduled_for   datetime2(7)  NULL,
    CONSTRAINT PK_Logs PRIMARY KEY CLUSTERED (id),
    CONSTRAINT CK_Logs_outcome CHECK (outcome IN ('running', 'succeeded', 'failed', 'abandoned', 'released'))
);

CREATE NONCLUSTERED INDEX IX_Logs_Task ON stageq.Logs (task_id, lease_token);
CREATE NONCLUSTERED INDEX IX_Logs_Process ON stageq.Logs (process_name, started_at);
CREATE NONCLUSTERED INDEX IX_Logs_Started ON stageq.Logs (started_at);
CREATE NONCLUSTERED INDEX IX_Logs_Schedule ON stageq.Logs (schedule_name, scheduled_for);

CREATE TABLE stageq.Workers (
    id           nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    hostname     nvarchar(256) NOT NULL,
    pid          int           NOT NULL,
    concurrency  int           NOT NULL,
    version      nvarchar(200) NOT NULL CONSTRAINT DF_Workers_version DEFAULT (N''),
    started_at   datetime2(7)  NOT NULL CONSTRAINT DF_Workers_started_at DEFAULT (SYSUTCDATETIME()),
    heartbeat_at datetime2(7)  NOT NULL CONSTRAINT DF_Workers_heartbeat_at DEFAULT (SYSUTCDATETIME()),
    stopped_at   datetime2(7)  NULL,
    CONSTRAINT PK_Workers PRIMARY KEY CLUSTERED (id)
);

-- A named limit ('erp-api') caps the running tasks whose limit_key is the name;
-- 'kind:<kind>' caps the running tasks of a kind; a key without a row is
-- unlimited. Not counters: a slot is a running task, counted under the limit row's
-- update lock, so it is released exactly when the task stops running. The key holds
-- 'kind:' plus a whole kind (200 characters): cut to 200, two long kinds would
-- share one limit.
CREATE TABLE stageq.Limits (
    [key]       nvarchar(205) COLLATE Latin1_General_100_BIN2 NOT NULL,
    max_running int           NOT NULL,
    updated_at  datetime2(7)  NOT NULL CONSTRAINT DF_Limits_updated_at DEFAULT (SYSUTCDATETIME()),
    CONSTRAINT PK_Limits PRIMARY KEY CLUSTERED ([key]),
    CONSTRAINT CK_Limits_key CHECK (DATALENGTH([key]) > 0),
    CONSTRAINT CK_Limits_max_running CHECK (max_running >= 0)
);

-- Recurring schedules: a named plan (stages.Plan as JSON) with a cron expression or
-- an interval. next_run is compared with the database's clock only. A worker locks
-- a due row (UPDLOCK, READPAST), enqueues the tick through stageq.Submit and
-- advances next_run in the same transaction: one enqueue per tick.
CREATE TABLE stageq.Schedules (
    id             bigint IDENTITY(1, 1) NOT NULL,
    name           nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    cron           nvarchar(200) NULL,
    interval_ms    bigint        NULL,
    [plan]         nvarchar(max) NOT NULL,
    missed         varchar(10)   NOT NULL CONSTRAINT DF_Schedules_missed DEFAULT ('skip'),
    grace_ms       bigint        NOT NULL CONSTRAINT DF_Schedules_grace_ms DEFAULT (60000),
    singleton      bit           NOT NULL CONSTRAINT DF_Schedules_singleton DEFAULT (0),
    paused         bit           NOT NULL CONSTRAINT DF_Schedules_paused DEFAULT (0),
    next_run       datetime2(7)  NOT NULL,
    last_run       datetime2(7)  NULL,
    last_outcome   varchar(20)   NULL,
    last_worker_id nvarchar(200) NULL,
    last_fired_at  datetime2(7)  NULL,
    created_at     datetime2(7)  NOT NULL CONSTRAINT DF_Schedules_created_at DEFAULT (SYSUTCDATETIME()),
    updated_at     datetime2(7)  NOT NULL CONSTRAINT DF_Schedules_updated_at DEFAULT (SYSUTCDATETIME()),
    CONSTRAINT PK_Schedules PRIMARY KEY CLUSTERED (id),
    CONSTRAINT UQ_Schedules_name UNIQUE (name),
    CONSTRAINT CK_Schedules_name CHECK (DATALENGTH(name) > 0),
    CONSTRAINT CK_Schedules_cron CHECK (DATALENGTH(cron) > 0),
    CONSTRAINT CK_Schedules_interval_ms CHECK (interval_ms > 0),
    CONSTRAINT CK_Schedules_when CHECK ((cron IS NULL AND interval_ms IS NOT NULL) OR (cron IS NOT NULL AND interval_ms IS NULL)),
    CONSTRAINT CK_Schedules_missed CHECK (missed IN ('skip', 'once')),
    CONSTRAINT CK_Schedules_grace_ms CHECK (grace_ms >= 0)
);

-- "What is due?" is a seek on (paused = 0, next_run).
CREATE NONCLUSTERED INDEX IX_Schedules_Due ON stageq.Schedules (paused, next_run);

-- One row per tick handled: who enqueued (or skipped) what, and a second guarantee
-- of once per tick (the primary key).
CREATE TABLE stageq.ScheduleRuns (
    schedule_id   bigint        NOT NULL,
    scheduled_for datetime2(7)  NOT NULL,
    outcome       varchar(20)   NOT NULL,
    process_id    bigint        NULL,
    task_count    int           NOT NULL CONSTRAINT DF_ScheduleRuns_task_count DEFAULT (0),
    worker_id     nvarchar(200) NOT NULL,
    fired_at      datetime2(7)  NOT NULL CONSTRAINT DF_ScheduleRuns_fired_at DEFAULT (SYSUTCDATETIME()),
    CONSTRAINT PK_ScheduleRuns PRIMARY KEY CLUSTERED (schedule_id, scheduled_for),
    CONSTRAINT FK_ScheduleRuns_Schedules FOREIGN KEY (schedule_id) REFERENCES stageq.Schedules (id) ON DELETE CASCADE,
    CONSTRAINT CK_ScheduleRuns_outcome CHECK (outcome IN ('enqueued', 'caught-up', 'missed', 'skipped', 'manual'))
);

-- Exclusive leases: a named lock with a holder, an expiry on the database's clock
-- and a fencing token that grows whenever a new holder takes the lease.
CREATE TABLE stageq.ExclusiveLeases (
    name        nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    holder      nvarchar(200) COLLATE Latin1_General_100_BIN2 NULL,
    token       bigint        NOT NULL,
    acquired_at datetime2(7)  NOT NULL,
    expires_at  datetime2(7)  NOT NULL,
    updated_at  datetime2(7)  NOT NULL CONSTRAINT DF_ExclusiveLeases_updated_at DEFAULT (SYSUTCDATETIME()),
    CONSTRAINT PK_ExclusiveLeases PRIMARY KEY CLUSTERED (name),
    CONSTRAINT CK_ExclusiveLeases_name CHECK (DATALENGTH(name) > 0),
    CONSTRAINT CK_ExclusiveLeases_holder CHECK (DATALENGTH(holder) > 0)
);

-- stageq.RefreshProcess re-derives whether a process is runnable (has an available
-- task, is not paused, runs fewer than max_parallel). The caller holds the process
-- row's update lock. A process that wakes joins at the run queue's current virtual
-- time, so being idle earns no burst and a stale high pass no penalty; that
-- virtual time is read with READPAST (a process row a claim is updating is skipped),
-- so this procedure never waits for a claim.
EXEC (N'
CREATE PROCEDURE stageq.RefreshProcess
    @ProcessId bigint
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

    DECLARE @Runnable bit, @Paused bit, @MaxParallel int, @ReadyAt datetime2(7),
            @Ready datetime2(7), @Run bit, @Running int, @VMin bigint;

    SELECT @Runnable = p.runnable, @Paused = p.paused, @MaxParallel = p.max_parallel, @ReadyAt = p.ready_at
      FROM stageq.Processes AS p WITH (UPDLOCK, ROWLOCK, INDEX(PK_Processes))
     WHERE p.id = @ProcessId;
    IF @@ROWCOUNT = 0
        RETURN 0;

    -- Only holders of the process lock change this process''s available tasks.
    SELECT TOP (1) @Ready = t.run_at
      FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Ready))
     WHERE t.process_id = @ProcessId AND t.state = ''available''
     ORDER BY t.run_at;

    SET @Run = CASE WHEN @Ready IS NOT NULL AND @Paused = 0 THEN 1 ELSE 0 END;
    IF @Run = 1 AND @MaxParallel IS NOT NULL
    BEGIN
        SELECT @Running = COUNT(*)
          FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Ready))
         WHERE t.process_id = @ProcessId AND t.state = ''running'';
        IF @Running >= @MaxParallel
            SET @Run = 0;
    END;

    IF @Run = 1 AND @Runnable = 0
    BEGIN
        SELECT @VMin = MIN(v.pass)
          FROM stageq.Processes AS v WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Processes_VTime))
         WHERE v.runnable = 1;
        UPDATE stageq.Processes
           SET runnable = 1, ready_at = @Ready, pass = COALESCE(@VMin, pass)
         WHERE id = @ProcessId;
    END
    ELSE IF @Run <> @Runnable OR @Ready <> @ReadyAt
            OR (@Ready IS NULL AND @ReadyAt IS NOT NULL) OR (@Ready IS NOT NULL AND @ReadyAt IS NULL)
    BEGIN
        UPDATE stageq.Processes SET runnable = @Run, ready_at = @Ready WHERE id = @ProcessId;
    END;
    RETURN 0;
END;
');

-- stageq.OpenStage re-derives which tasks of a process may run: the tasks of its
-- lowest order become 'available', higher ones 'blocked'; then RefreshProcess. The
-- caller holds the process row's update lock (taken first by Submit, Finish and
-- Rescue). Cost: one seek on IX_Tasks_Stage for the lowest order, plus the rows of
-- the stage that opens (or closes) when the stage changes; nothing when it does not.
EXEC (N'
CREATE PROCEDURE stageq.OpenStage
    @ProcessId bigint
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

    DECLARE @Old int, @New int, @Now datetime2(7) = SYSUTCDATETIME(),
            @ChunkStart bigint, @ChunkEnd bigint;

    -- Already locked by the caller; asking again is free.
    SELECT @Old = p.current_order
      FROM stageq.Processes AS p WITH (UPDLOCK, ROWLOCK, INDEX(PK_Processes))
     WHERE p.id = @ProcessId;

    -- A locking read (READCOMMITTEDLOCK) even under READ_COMMITTED_SNAPSHOT. Only
    -- holders of the process lock change this process''s IX_Tasks_Stage entries.
    SELECT @New = MIN(t.execution_order)
      FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Stage))
     WHERE t.process_id = @ProcessId;

    IF @New IS NULL
    BEGIN
        -- No task left: the process is done. failed_tasks is necessarily 0 here
        -- (failed tasks stay in the table); resetting it heals any drift.
        UPDATE stageq.Processes
           SET current_order = NULL, state = ''succeeded'', failed_tasks = 0,
               runnable = 0, ready_at = NULL, updated_at = @Now, finished_at = @Now
         WHERE id = @ProcessId;
        RETURN 0;
    END;

    -- A stage is re-stated in chunks of at most 1,000 tasks in id order (the
    -- clustered key, which IX_Tasks_Stage carries after its own keys): SQL Server
    -- tries to escalate to a table lock, which READPAST cannot pass over, once one
    -- statement holds 5,000 locks on one index. Every chunk is in the caller''s
    -- transaction, so the stage still opens all at once.
    IF @Old IS NOT NULL AND @New < @Old
    BEGIN
        -- A lower order arrived: tasks of the old stage that have not started wait
        -- again. Only the open stage can hold available tasks (Finish and Rescue
        -- re-queue a task as blocked when its order is not the open one).
        SET @ChunkStart = 0;
        WHILE 1 = 1
        BEGIN
            SET @ChunkEnd = NULL;
            SELECT @ChunkEnd = MAX(k.id)
              FROM (SELECT TOP (1000) t.id
                      FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Stage))
                     WHERE t.process_id = @ProcessId AND t.execution_order = @Old AND t.id > @ChunkStart
                     ORDER BY t.id) AS k;
            IF @ChunkEnd IS NULL
                BREAK;
            UPDATE t
               SET state = ''blocked''
              FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(IX_Tasks_Stage))
             WHERE t.process_id = @ProcessId AND t.execution_order = @Old
               AND t.id > @ChunkStart AND t.id <= @ChunkEnd AND t.state = ''available'';
            SET @ChunkStart = @ChunkEnd;
        END;
    END;

    IF @Old IS NULL OR @Old <> @New
    BEGIN
        SET @ChunkStart = 0;
        WHILE 1 = 1
        BEGIN
            SET @ChunkEnd = NULL;
            SELECT @ChunkEnd = MAX(k.id)
              FROM (SELECT TOP (1000) t.id
                      FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Stage))
                     WHERE t.process_id = @ProcessId AND t.execution_order = @New AND t.id > @ChunkStart
                     ORDER BY t.id) AS k;
            IF @ChunkEnd IS NULL
                BREAK;
            UPDATE t
               SET state = ''available''
              FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(IX_Tasks_Stage))
             WHERE t.process_id = @ProcessId AND t.execution_order = @New
               AND t.id > @ChunkStart AND t.id <= @ChunkEnd AND t.state = ''blocked'';
            SET @ChunkStart = @ChunkEnd;
        END;
    END;

    UPDATE stageq.Processes
       SET current_order = @New,
           state = CASE WHEN failed_tasks > 0 THEN ''failed'' ELSE ''active'' END,
           updated_at = @Now, finished_at = NULL
     WHERE id = @ProcessId;

    EXEC stageq.RefreshProcess @ProcessId = @ProcessId;
    RETURN 0;
END;
');

-- stageq.Submit inserts a batch of tasks into one process, in the caller's
-- transaction when there is one. @Tasks is a JSON array of objects:
--   {"execution_order": int, "body": text, "kind": text, "max_attempts": int,
--    "priority": int, "atomic": bool, "run_at": ISO 8601 time, "delay_ms": int,
--    "limit_key": text}
-- Only execution_order and body are required. @Priority, @Weight, @MaxParallel,
-- when not NULL, change the process's scheduling (@MaxParallel = 0 removes the
-- cap). Returns one row (process_id, task_id) per task, in the order given
-- (identity values follow INSERT ... SELECT ... ORDER BY), unless @ResultSet = 0.
-- @TaskId receives the last task's id (the only one, for Enqueue). Bad input raises
-- error 50001-50003 and changes nothing.
EXEC (N'
CREATE PROCEDURE stageq.Submit
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

    DECLARE @Name nvarchar(200), @Cur int, @Min int, @Open int, @Bad int,
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
        SELECT @ProcessId = p.id, @Cur = p.current_order, @Name = p.name
          FROM stageq.Processes AS p WITH (UPDLOCK, HOLDLOCK, ROWLOCK, INDEX(UQ_Processes_name))
         WHERE p.name = @Process;
        IF @ProcessId IS NULL
        BEGIN
            INSERT INTO stageq.Processes (name) VALUES (@Name);
            SET @ProcessId = CONVERT(bigint, SCOPE_IDENTITY());
        END;

        IF @Priority IS NOT NULL OR @Weight IS NOT NULL OR @MaxParallel IS NOT NULL
            UPDATE stageq.Processes
               SET priority = COALESCE(@Priority, priority),
                   weight = COALESCE(@Weight, weight),
                   max_parallel = CASE WHEN @MaxParallel IS NULL THEN max_parallel
                                       WHEN @MaxParallel = 0 THEN NULL ELSE @MaxParallel END,
                   updated_at = @Now
             WHERE id = @ProcessId;

        SELECT @Min = MIN(TRY_CONVERT(int, r.execution_order)) FROM @Raw AS r;
        SET @Open = CASE WHEN @Cur IS NULL OR @Min < @Cur THEN @Min ELSE @Cur END;

        -- Tasks of the stage open after this submission start available, the rest
        -- blocked; OpenStage then blocks again a started stage above a new lower one.
        -- Inserted 1,000 at a time (r.ord is 1..n): SQL Server tries to escalate to
        -- a table lock, which every claim''s READPAST would wait for, once one
        -- statement holds 5,000 locks on one index. All chunks are one transaction.
        SELECT @Last = MAX(r.ord) FROM @Raw AS r;
        SET @ChunkStart = 1;
        WHILE @ChunkStart <= @Last
        BEGIN
            SET @ChunkEnd = @ChunkStart + 999;
            INSERT INTO stageq.Tasks (process_id, process_name, execution_order, kind, body, state,
                                      priority, max_attempts, atomic, run_at, limit_key)
            OUTPUT inserted.id INTO @Ids (id)
            SELECT @ProcessId, @Name, o.execution_order, COALESCE(r.kind, N''sql''), r.body,
                   CASE WHEN o.execution_order = @Open THEN ''available'' ELSE ''blocked'' END,
                   COALESCE(TRY_CONVERT(int, r.priority), 0),
                   COALESCE(TRY_CONVERT(int, r.max_attempts), 3),
                   CASE WHEN r.atomic = N''true'' THEN 1 ELSE 0 END,
                   COALESCE(CONVERT(datetime2(7), SWITCHOFFSET(TRY_CONVERT(datetimeoffset(7), r.run_at), ''+00:00'')),
                            DATEADD(millisecond, CONVERT(int, COALESCE(TRY_CONVERT(bigint, r.delay_ms), 0) % 1000),
                                    DATEADD(second, CONVERT(int, COALESCE(TRY_CONVERT(bigint, r.delay_ms), 0) / 1000), @Now))),
                   r.limit_key
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

-- stageq.Enqueue is the SQL API for one task, the seed's ExecAsync done right:
-- the same validation as Submit, a clear error for bad input, and the task commits
-- with the caller's transaction, so several calls inside BEGIN TRANSACTION ...
-- COMMIT are one atomic submission:
--   EXEC stageq.Enqueue N'EXEC dbo.LoadCustomers', 200;
--   EXEC stageq.Enqueue @Body = N'EXEC etl.Load', @ExecutionOrder = 200,
--        @Process = N'nightly', @MaxAttempts = 5, @TaskId = @id OUTPUT;
-- Returns the new task's id in @TaskId and as a one-row result set (task_id).
EXEC (N'
CREATE PROCEDURE stageq.Enqueue
    @Body           nvarchar(max),
    @ExecutionOrder int = 0,
    @Process        nvarchar(400) = N''default'',
    @MaxAttempts    int = 3,
    @Priority       int = 0,
    @RunAt          datetimeoffset(7) = NULL,
    @Atomic         bit = 0,
    @Kind           nvarchar(400) = N''sql'',
    @LimitKey       nvarchar(400) = NULL,
    @TaskId         bigint = NULL OUTPUT
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;

    -- A NULL argument leaves its property out; Submit then names what is missing.
    DECLARE @Tasks nvarchar(max) = (
        SELECT @ExecutionOrder AS execution_order, @Kind AS kind, @Body AS body,
               @MaxAttempts AS max_attempts, @Priority AS priority, @Atomic AS atomic,
               @RunAt AS run_at, @LimitKey AS limit_key
        FOR JSON PATH);

    EXEC stageq.Submit @Process = @Process, @Tasks = @Tasks, @TaskId = @TaskId OUTPUT, @ResultSet = 0;
    SELECT @TaskId AS task_id;
    RETURN 0;
END;
');

-- stageq.Claim leases up to @Max tasks to @WorkerId with lease token @Token for
-- @LeaseMs, fairly across processes, writes their Logs rows and returns them, in
-- one transaction. Each round takes the runnable process first in service order
-- (priority, then lowest pass), locks its row, takes one task of it that the
-- concurrency limits admit and advances its pass; one task per process per round
-- is what makes one claim of many tasks round robin too. At most @Max + 8 rounds.
--
-- Locks, in the queue's order: process row, then limit rows, then task rows. A
-- claim passes over process and limit rows that others hold (READPAST) and waits
-- for a lock only while it holds none (the very first process), so it cannot be
-- part of a deadlock cycle with Finish, Submit, Rescue or another claim. The task
-- it takes is read with UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK; READ
-- COMMITTED plus READCOMMITTEDLOCK keep READPAST legal and locking on databases
-- with READ_COMMITTED_SNAPSHOT on.
EXEC (N'
CREATE PROCEDURE stageq.Claim
    @Max      int,
    @WorkerId nvarchar(200),
    @Token    bigint,
    @LeaseMs  int
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

    DECLARE @Now datetime2(7), @Expires datetime2(7), @Rounds int = 0, @Count int = 0,
            @Cand bigint, @Pid bigint, @Weight int, @MaxParallel int, @Tid bigint,
            @Kind nvarchar(200), @Key nvarchar(200), @KindKey nvarchar(205), @Tries int,
            @Admit bit, @LimitMax int, @Got bit, @VMin bigint;
    DECLARE @Skip TABLE (id bigint NOT NULL PRIMARY KEY);
    DECLARE @Rejected TABLE (id bigint NOT NULL PRIMARY KEY);
    DECLARE @Claimed TABLE (
        id bigint NOT NULL PRIMARY KEY, process_id bigint NOT NULL, process_name nvarchar(200) NOT NULL,
        execution_order int NOT NULL, kind nvarchar(200) NOT NULL, body nvarchar(max) NOT NULL,
        attempt int NOT NULL, max_attempts int NOT NULL, atomic bit NOT NULL,
        schedule_name nvarchar(200) NULL, scheduled_for datetime2(7) NULL);

    IF @Max IS NULL OR @Max < 0 SET @Max = 0;
    IF @LeaseMs IS NULL OR @LeaseMs < 1
        THROW 50005, N''stageq: the lease must be at least 1 ms'', 1;

    BEGIN TRY
        BEGIN TRANSACTION;
        SET @Now = SYSUTCDATETIME();
        SET @Expires = DATEADD(millisecond, @LeaseMs, @Now);

        WHILE @Count < @Max AND @Rounds < @Max + 8
        BEGIN
            SET @Rounds = @Rounds + 1;

            -- The next runnable process in service order. A plain READPAST read: it
            -- keeps no lock, and passes over queue entries being rewritten.
            SET @Cand = NULL;
            SELECT TOP (1) @Cand = q.id
              FROM stageq.Processes AS q WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Processes_Queue))
             WHERE q.runnable = 1 AND q.ready_at <= @Now
               AND NOT EXISTS (SELECT 1 FROM @Skip AS s WHERE s.id = q.id)
             ORDER BY q.priority DESC, q.pass, q.id;
            IF @Cand IS NULL
                BREAK;

            -- Lock its row (the clustered key every writer of a process locks). The
            -- claim never waits for it: a row held elsewhere (another claim, a
            -- finish, or a submission an application keeps open in a long
            -- transaction of its own) is passed over for the next process.
            SET @Pid = NULL;
            SELECT @Pid = p.id, @Weight = p.weight, @MaxParallel = p.max_parallel
              FROM stageq.Processes AS p WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK, INDEX(PK_Processes))
             WHERE p.id = @Cand AND p.runnable = 1 AND p.ready_at <= @Now;
            IF @Pid IS NULL
            BEGIN
                INSERT INTO @Skip (id) VALUES (@Cand);
                CONTINUE;
            END;

            -- One task of it that its limits admit (at most 8 looked at).
            DELETE FROM @Rejected;
            SET @Got = 0;
            SET @Tries = 0;
            IF @MaxParallel IS NOT NULL
               AND (SELECT COUNT(*) FROM stageq.Tasks AS r WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_Ready))
                     WHERE r.process_id = @Pid AND r.state = ''running'') >= @MaxParallel
                SET @Tries = 8;
            WHILE @Tries < 8
            BEGIN
                SET @Tries = @Tries + 1;
                SET @Tid = NULL;
                SELECT TOP (1) @Tid = t.id, @Kind = t.kind, @Key = t.limit_key
                  FROM stageq.Tasks AS t WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK, INDEX(IX_Tasks_ClaimProcess))
                 WHERE t.process_id = @Pid AND t.state = ''available'' AND t.run_at <= @Now
                   AND NOT EXISTS (SELECT 1 FROM @Rejected AS x WHERE x.id = t.id)
                 ORDER BY t.priority DESC, t.run_at, t.id;
                IF @Tid IS NULL
                    BREAK;

                -- A limit row another claim is admitting under counts as full for
                -- this one (READPAST), so a claim never waits while it holds locks.
                -- The count runs after the row is locked, so it sees every task a
                -- previous holder of that lock admitted.
                SET @Admit = 1;
                IF @Key IS NOT NULL AND EXISTS (SELECT 1 FROM stageq.Limits AS l WITH (READCOMMITTEDLOCK) WHERE l.[key] = @Key)
                BEGIN
                    SET @LimitMax = NULL;
                    SELECT @LimitMax = l.max_running
                      FROM stageq.Limits AS l WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
                     WHERE l.[key] = @Key;
                    IF @LimitMax IS NULL
                       OR (SELECT COUNT(*) FROM stageq.Tasks AS r WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_RunningLimit))
                            WHERE r.limit_key = @Key AND r.state = ''running'') >= @LimitMax
                        SET @Admit = 0;
                END;
                SET @KindKey = CONCAT(N''kind:'', @Kind);
                IF @Admit = 1 AND EXISTS (SELECT 1 FROM stageq.Limits AS l WITH (READCOMMITTEDLOCK) WHERE l.[key] = @KindKey)
                BEGIN
                    SET @LimitMax = NULL;
                    SELECT @LimitMax = l.max_running
                      FROM stageq.Limits AS l WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
                     WHERE l.[key] = @KindKey;
                    IF @LimitMax IS NULL
                       OR (SELECT COUNT(*) FROM stageq.Tasks AS r WITH (READCOMMITTEDLOCK, INDEX(IX_Tasks_RunningKind))
                            WHERE r.kind = @Kind AND r.state = ''running'') >= @LimitMax
                        SET @Admit = 0;
                END;
                IF @Admit = 0
                BEGIN
                    INSERT INTO @Rejected (id) VALUES (@Tid);
                    CONTINUE;
                END;

                -- The row is held with an update lock since it was read, and its
                -- process row too: no other session can have changed it.
                UPDATE t
                   SET state = ''running'', attempt = t.attempt + 1, worker_id = @WorkerId,
                       lease_token = @Token, lease_expires_at = @Expires
                OUTPUT inserted.id, inserted.process_id, inserted.process_name, inserted.execution_order,
                       inserted.kind, inserted.body, inserted.attempt, inserted.max_attempts, inserted.atomic,
                       inserted.schedule_name, inserted.scheduled_for
                  INTO @Claimed (id, process_id, process_name, execution_order, kind, body, attempt,
                                 max_attempts, atomic, schedule_name, scheduled_for)
                  FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(PK_Tasks))
                 WHERE t.id = @Tid AND t.state = ''available'';
                IF @@ROWCOUNT = 1
                BEGIN
                    SET @Got = 1;
                    SET @Count = @Count + 1;
                END;
                BREAK;
            END;

            IF @Got = 1
                UPDATE stageq.Processes SET pass = pass + 1000000 / @Weight WHERE id = @Pid;
            ELSE
            BEGIN
                -- Nothing it may start now: it loses this turn and goes to the end of
                -- the current round (idempotent, so waiting never inflates its pass).
                INSERT INTO @Skip (id) VALUES (@Pid);
                SET @VMin = NULL;
                SELECT @VMin = MIN(v.pass)
                  FROM stageq.Processes AS v WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Processes_VTime))
                 WHERE v.runnable = 1;
                UPDATE stageq.Processes
                   SET pass = CASE WHEN pass > COALESCE(@VMin, pass) + 1000000 / @Weight THEN pass
                                   ELSE COALESCE(@VMin, pass) + 1000000 / @Weight END
                 WHERE id = @Pid;
            END;
            EXEC stageq.RefreshProcess @ProcessId = @Pid;
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

-- stageq.Finish ends an attempt, fenced by the lease token. @Outcome is
-- 'succeeded', 'failed' or 'released'; with 'failed', @RetryMs > 0 schedules another
-- attempt and NULL or 0 fails the task for good. @Held = 0, with nothing changed,
-- when the token no longer holds the task. Runs in the caller's transaction when
-- there is one (an atomic task finishes in the transaction that ran its body).
EXEC (N'
CREATE PROCEDURE stageq.Finish
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

    DECLARE @ProcessId bigint, @WorkerId nvarchar(200), @Cur int, @RetryAt datetime2(7),
            @Now datetime2(7), @Rows int;
    SET @Held = 0;

    IF @Outcome IS NULL OR @Outcome NOT IN (''succeeded'', ''failed'', ''released'')
        THROW 50004, N''stageq: finish outcome must be succeeded, failed or released'', 1;
    IF @RetryMs IS NOT NULL AND (@RetryMs < 0 OR @RetryMs > 315360000000)
        THROW 50004, N''stageq: retry delay must be from 0 to 315360000000 ms (ten years)'', 1;

    -- The fence, read holding nothing: the shared lock is released as soon as the
    -- row is read. Only the lease holder gets past this point.
    SELECT @ProcessId = t.process_id, @WorkerId = t.worker_id
      FROM stageq.Tasks AS t WITH (READCOMMITTEDLOCK, INDEX(PK_Tasks))
     WHERE t.id = @TaskId AND t.lease_token = @Token AND t.state = ''running'';
    IF @ProcessId IS NULL
        RETURN 0;

    BEGIN TRY
        BEGIN TRANSACTION;

        -- Lock order everywhere: the process row; then the task row, reached through
        -- IX_Tasks_Worker as lease extension reaches it; then the Logs row.
        SELECT @Cur = p.current_order
          FROM stageq.Processes AS p WITH (UPDLOCK, ROWLOCK, INDEX(PK_Processes))
         WHERE p.id = @ProcessId;

        SET @Now = SYSUTCDATETIME();
        IF @Outcome = ''failed'' AND @RetryMs > 0
            SET @RetryAt = DATEADD(millisecond, CONVERT(int, @RetryMs % 1000),
                                   DATEADD(second, CONVERT(int, @RetryMs / 1000), @Now));

        IF @Outcome = ''succeeded''
        BEGIN
            DELETE t
              FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(IX_Tasks_Worker))
             WHERE t.worker_id = @WorkerId AND t.state = ''running''
               AND t.id = @TaskId AND t.lease_token = @Token;
            SET @Rows = @@ROWCOUNT;
        END
        ELSE IF @Outcome = ''released'' OR @RetryAt IS NOT NULL
        BEGIN
            -- Back to the queue; as blocked when its stage is no longer the open one
            -- (a lower order arrived while it ran). A released attempt is not counted.
            UPDATE t
               SET state = CASE WHEN t.execution_order = @Cur THEN ''available'' ELSE ''blocked'' END,
                   attempt = CASE WHEN @Outcome = ''released'' THEN t.attempt - 1 ELSE t.attempt END,
                   run_at = COALESCE(@RetryAt, @Now),
                   last_error = CASE WHEN @Outcome = ''released'' THEN t.last_error ELSE @Error END,
                   worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
              FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(IX_Tasks_Worker))
             WHERE t.worker_id = @WorkerId AND t.state = ''running''
               AND t.id = @TaskId AND t.lease_token = @Token;
            SET @Rows = @@ROWCOUNT;
        END
        ELSE
        BEGIN
            -- Failed for good: the task stays and blocks later stages until an
            -- operator retries or discards it.
            UPDATE t
               SET state = ''failed'', last_error = @Error,
                   worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
              FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(IX_Tasks_Worker))
             WHERE t.worker_id = @WorkerId AND t.state = ''running''
               AND t.id = @TaskId AND t.lease_token = @Token;
            SET @Rows = @@ROWCOUNT;
            IF @Rows = 1
                UPDATE stageq.Processes SET failed_tasks = failed_tasks + 1 WHERE id = @ProcessId;
        END;

        IF @Rows = 0
        BEGIN
            -- Rescued between the fence read and the lock: nothing changed. COMMIT,
            -- not ROLLBACK, so that a caller''s own transaction survives.
            COMMIT TRANSACTION;
            RETURN 0;
        END;

        UPDATE l
           SET ended_at = @Now, duration_ms = DATEDIFF_BIG(millisecond, l.started_at, @Now),
               outcome = @Outcome, error = @Error, retry_at = @RetryAt
          FROM stageq.Logs AS l WITH (ROWLOCK, INDEX(IX_Logs_Task))
         WHERE l.task_id = @TaskId AND l.lease_token = @Token;

        -- A stage may open, a max_parallel slot is free: re-derive both.
        EXEC stageq.OpenStage @ProcessId = @ProcessId;

        COMMIT TRANSACTION;
        SET @Held = 1;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
        THROW;
    END CATCH;
    RETURN 0;
END;
');

-- stageq.Rescue returns up to @Max tasks whose lease expired to the queue, or fails
-- them when they are out of attempts, and closes their Logs rows as abandoned. Each
-- task is handled in a transaction of its own: a pass never holds more than one
-- process lock (two rescuers cannot deadlock on process rows) and never more than a
-- handful of row locks, far below the 5,000 locks that trigger escalation.
EXEC (N'
CREATE PROCEDURE stageq.Rescue
    @Max     int = 100,
    @Rescued int = 0 OUTPUT
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

    DECLARE @Seq int = 0, @Id bigint, @ProcessId bigint, @WorkerId nvarchar(200), @Token bigint,
            @Cur int, @Now datetime2(7), @Msg nvarchar(400), @NewState varchar(20);
    DECLARE @Candidates TABLE (
        seq int IDENTITY(1, 1) NOT NULL PRIMARY KEY, id bigint NOT NULL, process_id bigint NOT NULL,
        worker_id nvarchar(200) NOT NULL, lease_token bigint NOT NULL);

    SET @Rescued = 0;
    IF @Max IS NULL OR @Max < 1 SET @Max = 100;
    IF @Max > 1000 SET @Max = 1000;

    -- Candidates, read keeping no lock: READPAST passes over rows another session
    -- is changing right now (a finish, an extension); the next pass sees them.
    INSERT INTO @Candidates (id, process_id, worker_id, lease_token)
    SELECT TOP (@Max) t.id, t.process_id, t.worker_id, t.lease_token
      FROM stageq.Tasks AS t WITH (READPAST, READCOMMITTEDLOCK, INDEX(IX_Tasks_Lease))
     WHERE t.state = ''running'' AND t.lease_expires_at < SYSUTCDATETIME()
       AND t.worker_id IS NOT NULL AND t.lease_token IS NOT NULL
     ORDER BY t.lease_expires_at;

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

            SELECT @Cur = p.current_order
              FROM stageq.Processes AS p WITH (UPDLOCK, ROWLOCK, INDEX(PK_Processes))
             WHERE p.id = @ProcessId;

            SET @Now = SYSUTCDATETIME();
            SET @Msg = CONCAT(N''lease expired: worker '', @WorkerId, N'' stopped extending it'');
            SET @NewState = NULL;

            -- Re-checked under the lock: a lease extended or a task finished since
            -- the candidates were read no longer matches.
            UPDATE t
               SET @NewState = state = CASE WHEN t.attempt >= t.max_attempts THEN ''failed''
                                            WHEN t.execution_order = @Cur THEN ''available''
                                            ELSE ''blocked'' END,
                   run_at = @Now, last_error = @Msg,
                   worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
              FROM stageq.Tasks AS t WITH (ROWLOCK, INDEX(IX_Tasks_Worker))
             WHERE t.worker_id = @WorkerId AND t.state = ''running'' AND t.id = @Id
               AND t.lease_token = @Token AND t.lease_expires_at < @Now;

            IF @NewState IS NOT NULL
            BEGIN
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

            COMMIT TRANSACTION;
        END TRY
        BEGIN CATCH
            IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION;
            THROW;
        END CATCH;
    END;
    RETURN 0;
END;
');

COMMIT TRANSACTION;
