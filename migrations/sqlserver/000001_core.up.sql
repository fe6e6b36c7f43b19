-- Since version 13 this file holds the tables only: the procedures it named
-- below are routines/sqlserver, installed per version apart from the tables.
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

-- stageq.OpenStage re-derives which tasks of a process may run: the tasks of its
-- lowest order become 'available', higher ones 'blocked'; then RefreshProcess. The
-- caller holds the process row's update lock (taken first by Submit, Finish and
-- Rescue). Cost: one seek on IX_Tasks_Stage for the lowest order, plus the rows of
-- the stage that opens (or closes) when the stage changes; nothing when it does not.

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

-- stageq.Enqueue is the SQL API for one task, the seed's ExecAsync done right:
-- the same validation as Submit, a clear error for bad input, and the task commits
-- with the caller's transaction, so several calls inside BEGIN TRANSACTION ...
-- COMMIT are one atomic submission:
--   EXEC stageq.Enqueue N'EXEC dbo.LoadCustomers', 200;
--   EXEC stageq.Enqueue @Body = N'EXEC etl.Load', @ExecutionOrder = 200,
--        @Process = N'nightly', @MaxAttempts = 5, @TaskId = @id OUTPUT;
-- Returns the new task's id in @TaskId and as a one-row result set (task_id).

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

-- stageq.Finish ends an attempt, fenced by the lease token. @Outcome is
-- 'succeeded', 'failed' or 'released'; with 'failed', @RetryMs > 0 schedules another
-- attempt and NULL or 0 fails the task for good. @Held = 0, with nothing changed,
-- when the token no longer holds the task. Runs in the caller's transaction when
-- there is one (an atomic task finishes in the transaction that ran its body).

-- stageq.Rescue returns up to @Max tasks whose lease expired to the queue, or fails
-- them when they are out of attempts, and closes their Logs rows as abandoned. Each
-- task is handled in a transaction of its own: a pass never holds more than one
-- process lock (two rescuers cannot deadlock on process rows) and never more than a
-- handful of row locks, far below the 5,000 locks that trigger escalation.

COMMIT TRANSACTION;

-- Since version 13 the procedures this version created or altered are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/sqlserver (see migrations/sqlserver/000013_routines_apart.up.sql).
