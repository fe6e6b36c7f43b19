-- Since version 13 this file holds the tables only: the routines it named
-- below are routines/postgres, installed per version apart from the tables.
-- stageq schema for PostgreSQL, in schema stageq: Processes, Tasks, Logs and
-- Workers; Limits; Schedules and exclusive leases; and the routines that keep
-- the stage barrier and fairness (stageq.submit, stageq.claim, stageq.finish,
-- stageq.rescue, stageq.open_stage, stageq.refresh_process). The queue's
-- statements call these routines so the logic lives in one place, and SQL users
-- enqueue with SELECT stageq.enqueue(...) under the same validation.
--
-- Fairness is stride scheduling kept on the process row: every runnable process
-- has a virtual time `pass`; a claim serves the runnable process with the highest
-- priority and, within a priority, the lowest pass, then advances its pass by
-- 1,000,000 / weight. Equal weights give round robin; weight 3 gets three turns to
-- weight 1's one. A process is 'runnable' when it has available tasks, is not
-- paused and runs fewer than max_parallel tasks; only runnable processes are in
-- the partial index processes_queue, so a claim is a seek there however many
-- processes are idle, blocked behind a running stage, paused or at their cap.
--
-- Limits are not counters. A slot is a running task: the claim counts the tasks
-- with state = 'running' and the limit's key, under the limit row's lock, before
-- it admits one more. A slot is therefore released exactly when its task stops
-- running - by stageq.finish, fenced by the lease token, or by stageq.rescue once
-- the lease expired - and a crash can neither leak a slot nor release one twice.
--
-- Lock order, everywhere: process row, then limit rows, then task rows. The claim
-- takes process and limit rows while it holds no other lock, or with SKIP LOCKED,
-- so it cannot deadlock with finish, submit or rescue.

CREATE SCHEMA IF NOT EXISTS stageq;

CREATE TABLE stageq.processes (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          text        NOT NULL UNIQUE CHECK (name <> '' AND length(name) <= 200),
    state         text        NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'succeeded', 'failed')),
    -- The lowest ExecutionOrder that still has tasks; NULL when the process has none.
    -- Only tasks of this order are 'available'; higher ones wait as 'blocked'.
    current_order int,
    priority      int         NOT NULL DEFAULT 0,
    weight        int         NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000),
    max_parallel  int         CHECK (max_parallel >= 1),
    paused        boolean     NOT NULL DEFAULT false,
    -- Stride scheduling's virtual time: lower is served first.
    pass          bigint      NOT NULL DEFAULT 0,
    -- Has available tasks, is not paused, is under max_parallel: maintained by
    -- stageq.refresh_process under the process row lock.
    runnable      boolean     NOT NULL DEFAULT false,
    -- The earliest run_at among the process's available tasks.
    ready_at      timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz
);

-- The default process holds nothing yet: it has nothing left to do.
INSERT INTO stageq.processes (name, state) VALUES ('default', 'succeeded');

-- The run queue, and its virtual time (the lowest pass) for processes that wake.
CREATE INDEX processes_queue ON stageq.processes (priority DESC, pass, id) WHERE runnable;
CREATE INDEX processes_vtime ON stageq.processes (pass) WHERE runnable;

-- The hot table: only unfinished tasks. A task that succeeds leaves it.
CREATE TABLE stageq.tasks (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    process_id       bigint      NOT NULL REFERENCES stageq.processes (id),
    execution_order  int         NOT NULL CHECK (execution_order >= 0),
    kind             text        NOT NULL DEFAULT 'sql' CHECK (kind <> '' AND length(kind) <= 200),
    body             text        NOT NULL,
    state            text        NOT NULL CHECK (state IN ('blocked', 'available', 'running', 'failed')),
    priority         int         NOT NULL DEFAULT 0,
    attempt          int         NOT NULL DEFAULT 0,
    max_attempts     int         NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    atomic           boolean     NOT NULL DEFAULT false,
    run_at           timestamptz NOT NULL DEFAULT now(),
    limit_key        text        CHECK (limit_key <> '' AND length(limit_key) <= 200),
    worker_id        text,
    lease_token      bigint,
    lease_expires_at timestamptz,
    last_error       text,
    -- The schedule and tick a task was enqueued for (NULL when enqueued by hand).
    schedule_name    text,
    scheduled_for    timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now()
);

-- The claim: per process, a seek into its available tasks only; blocked tasks
-- are in none of these indexes.
CREATE INDEX tasks_claim_process ON stageq.tasks (process_id, priority DESC, run_at, id) WHERE state = 'available';
CREATE INDEX tasks_ready ON stageq.tasks (process_id, run_at) WHERE state = 'available';
-- The barrier: the lowest order left in a process, and the tasks of one stage.
CREATE INDEX tasks_stage ON stageq.tasks (process_id, execution_order);
-- A process is failed while one of its tasks is: a seek, not a scan of the process.
CREATE INDEX tasks_failed ON stageq.tasks (process_id) WHERE state = 'failed';
-- Rescue of expired leases and lease extension by a worker.
CREATE INDEX tasks_lease ON stageq.tasks (lease_expires_at) WHERE state = 'running';
CREATE INDEX tasks_worker ON stageq.tasks (worker_id) WHERE state = 'running';
-- Slot counts: running tasks per process, per limit key and per kind.
CREATE INDEX tasks_running_process ON stageq.tasks (process_id) WHERE state = 'running';
CREATE INDEX tasks_running_limit ON stageq.tasks (limit_key) WHERE state = 'running' AND limit_key IS NOT NULL;
CREATE INDEX tasks_running_kind ON stageq.tasks (kind) WHERE state = 'running';
-- singleton schedules ask whether any task of the schedule is still in the queue.
CREATE INDEX tasks_schedule ON stageq.tasks (schedule_name) WHERE schedule_name IS NOT NULL;

-- A named limit ('erp-api') caps the running tasks whose limit_key is the name;
-- 'kind:<kind>' caps the running tasks of a kind. A key without a row is unlimited.
-- (A process's own cap is processes.max_parallel.)
CREATE TABLE stageq.limits (
    key         text        PRIMARY KEY CHECK (key <> '' AND length(key) <= 200),
    max_running int         NOT NULL CHECK (max_running >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per attempt, written when it starts and completed when it ends, never in
-- the task's own transaction. No foreign key: the audit trail outlives the task.
CREATE TABLE stageq.logs (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id         bigint      NOT NULL,
    process_id      bigint      NOT NULL,
    process_name    text        NOT NULL,
    execution_order int         NOT NULL,
    kind            text        NOT NULL,
    body            text        NOT NULL,
    worker_id       text        NOT NULL,
    attempt         int         NOT NULL,
    lease_token     bigint      NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at        timestamptz,
    duration_ms     bigint,
    outcome         text        NOT NULL DEFAULT 'running'
        CHECK (outcome IN ('running', 'succeeded', 'failed', 'abandoned', 'released')),
    error           text,
    retry_at        timestamptz,
    schedule_name   text,
    scheduled_for   timestamptz
);

CREATE INDEX logs_task ON stageq.logs (task_id, lease_token);
CREATE INDEX logs_process ON stageq.logs (process_id, started_at);
CREATE INDEX logs_started ON stageq.logs (started_at);
CREATE INDEX logs_schedule ON stageq.logs (schedule_name, scheduled_for) WHERE schedule_name IS NOT NULL;

CREATE TABLE stageq.workers (
    id           text        PRIMARY KEY,
    hostname     text        NOT NULL,
    pid          int         NOT NULL,
    concurrency  int         NOT NULL,
    version      text        NOT NULL DEFAULT '',
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    stopped_at   timestamptz
);

-- Recurring schedules. A schedule is a named template (a stages.Plan as JSON)
-- with a cron expression or an interval. next_run is the next tick, always
-- compared with the database's clock: a worker locks a due row (FOR UPDATE SKIP
-- LOCKED), enqueues the tick through stageq.submit and advances next_run in the
-- same transaction, so each tick is enqueued once however many workers race.
-- The ticks are computed by the worker (cron needs a real parser) from next_run
-- and the database's now, never from the worker's own clock.

CREATE TABLE stageq.schedules (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name           text        NOT NULL UNIQUE CHECK (name <> '' AND length(name) <= 200),
    -- Exactly one of cron and interval_ms says when the ticks are.
    cron           text        CHECK (cron <> '' AND length(cron) <= 200),
    interval_ms    bigint      CHECK (interval_ms > 0),
    plan           text        NOT NULL,
    -- skip: ticks missed by more than grace_ms are dropped; once: one catch-up run.
    missed         text        NOT NULL DEFAULT 'skip' CHECK (missed IN ('skip', 'once')),
    grace_ms       bigint      NOT NULL DEFAULT 60000 CHECK (grace_ms >= 0),
    -- singleton: a tick is skipped while a task of an earlier run is unfinished.
    singleton      boolean     NOT NULL DEFAULT false,
    paused         boolean     NOT NULL DEFAULT false,
    next_run       timestamptz NOT NULL,
    last_run       timestamptz,
    last_outcome   text,
    last_worker_id text,
    last_fired_at  timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CHECK ((cron IS NULL) <> (interval_ms IS NULL))
);

-- The scheduler's question "what is due?" is a seek on this index.
CREATE INDEX schedules_due ON stageq.schedules (next_run) WHERE NOT paused;

-- One row per tick handled: the audit of who enqueued (or skipped) what, and a
-- second guarantee of once per tick (the primary key).
CREATE TABLE stageq.schedule_runs (
    schedule_id   bigint      NOT NULL REFERENCES stageq.schedules (id) ON DELETE CASCADE,
    scheduled_for timestamptz NOT NULL,
    -- enqueued, caught-up (one run for missed ticks), missed (dropped),
    -- skipped (singleton: the previous run was unfinished), manual (run-now).
    outcome       text        NOT NULL CHECK (outcome IN ('enqueued', 'caught-up', 'missed', 'skipped', 'manual')),
    process_id    bigint,
    task_count    int         NOT NULL DEFAULT 0,
    worker_id     text        NOT NULL,
    fired_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule_id, scheduled_for)
);

-- Exclusive leases: a named lock with a holder, an expiry on the database's clock
-- and a fencing token. The row outlives its holders so the token keeps growing:
-- it is incremented whenever a different holder (or the same one after expiry)
-- takes the lease, and kept when the current holder re-acquires (reentrancy).
CREATE TABLE stageq.exclusive_leases (
    name        text        PRIMARY KEY CHECK (name <> '' AND length(name) <= 200),
    holder      text        CHECK (holder <> '' AND length(holder) <= 200),
    token       bigint      NOT NULL,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- stageq.refresh_process re-derives whether a process is runnable. Callers hold
-- the process row lock. A process that wakes joins at the run queue's current
-- virtual time, so being idle earns no burst and a stale high pass no penalty.

-- stageq.limit_admits says whether one more task with limit key p_key (NULL: none)
-- and kind p_kind may start now. It locks each limit row that applies (SKIP LOCKED:
-- a row another claim is admitting under counts as full for this claim, so the
-- claim never waits while it holds locks) and counts the running tasks in a new
-- statement, whose snapshot sees every claim that held the lock before. The locks
-- are kept to the end of the claim's transaction.

-- stageq.claim leases up to p_max tasks to worker p_worker with token p_token for
-- p_lease_ms, fairly across processes, and returns the leased rows (the caller
-- writes their Logs rows in the same statement).
--
-- Each turn seeks the run queue for the next process (priority, then lowest
-- pass), locks it, and takes as many of its tasks as stride scheduling gives it
-- before the next process's pass is reached: one task when several processes are
-- level, the whole batch when it runs alone. Its pass then advances by
-- 1,000,000 / weight per task. A claim of many tasks is therefore as fair as many
-- claims of one, at the cost of one statement per turn instead of one per task.
-- When no limit is defined at all, a turn's tasks are leased by one UPDATE;
-- otherwise each candidate is admitted by stageq.limit_admits.
--
-- At most p_max + 8 turns are taken, so a run queue headed by processes whose
-- tasks all wait on full limits costs a bounded amount; such a process is moved
-- to the end of the current round so that later claims reach the others.
--
-- enable_sort = off: every query here has an index in its ORDER BY's order, and
-- must use it. Without the setting, right after a large submission (before
-- autovacuum's ANALYZE) the planner may take tasks_ready's range on run_at and
-- sort all of a process's available tasks on every claim.

-- stageq.open_stage re-derives which tasks of a locked process may run: the tasks
-- of its lowest order become 'available', higher ones 'blocked'. It is called with
-- the process row locked, by submit (a lower order may arrive) and by finish and
-- rescue (the last task of a stage may have left). Every statement is a seek on
-- tasks_stage or tasks_failed, whatever the size of the process.

-- stageq.submit inserts a batch of tasks into one process in the caller's
-- transaction. p_tasks is a JSON array of objects:
--   {"execution_order": int, "body": text, "kind": text, "max_attempts": int,
--    "priority": int, "atomic": bool, "run_at": timestamptz, "delay_ms": bigint,
--    "limit_key": text}
-- Returns the new task ids in the order given.

-- stageq.enqueue is the SQL API for one task, the seed's ExecAsync done right:
--   SELECT stageq.enqueue('CALL etl.load()', 200);
--   SELECT stageq.enqueue('CALL etl.load()', 200, process => 'nightly', max_attempts => 5);
-- It returns the new task's id and commits with the caller's transaction.

-- stageq.finish ends an attempt, fenced by the lease token. p_outcome is
-- 'succeeded', 'failed' or 'released'; with 'failed', p_retry_ms > 0 schedules
-- another attempt and NULL fails the task for good. Returns false, changing
-- nothing, when the token no longer holds the task.

-- stageq.finish_many ends many attempts in one transaction, as stageq.finish
-- does one: p_ids, p_tokens, p_outcomes, p_errors and p_retry_ms are parallel
-- arrays. It returns the ids whose token still held; the others changed nothing.
-- The process rows are locked first, in ascending id order, so two batches
-- never wait on each other in a cycle; each process's stage is then re-derived
-- once for the whole batch. This is the worker's path: one round trip for as
-- many results as finished while the previous batch was being recorded.

-- stageq.rescue returns up to p_max tasks whose lease expired to the queue, or
-- fails them when they are out of attempts, and closes their Logs rows as abandoned.

-- Since version 13 the functions this version created or replaced are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/postgres (see migrations/postgres/000013_routines_apart.up.sql).
-- What remains here is the version's change to the tables.
