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
CREATE FUNCTION stageq.refresh_process(p_process_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_p       record;
    v_ready   timestamptz;
    v_run     boolean;
    v_running int;
    v_min     bigint;
BEGIN
    SELECT runnable, paused, max_parallel, ready_at INTO v_p
      FROM stageq.processes WHERE id = p_process_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT t.run_at INTO v_ready FROM stageq.tasks t
     WHERE t.process_id = p_process_id AND t.state = 'available'
     ORDER BY t.run_at LIMIT 1;
    v_run := v_ready IS NOT NULL AND NOT v_p.paused;
    IF v_run AND v_p.max_parallel IS NOT NULL THEN
        SELECT count(*) INTO v_running FROM stageq.tasks
         WHERE process_id = p_process_id AND state = 'running';
        v_run := v_running < v_p.max_parallel;
    END IF;
    IF v_run AND NOT v_p.runnable THEN
        SELECT pass INTO v_min FROM stageq.processes WHERE runnable ORDER BY pass LIMIT 1;
        UPDATE stageq.processes
           SET runnable = true, ready_at = v_ready, pass = coalesce(v_min, pass)
         WHERE id = p_process_id;
        PERFORM pg_notify('stageq_tasks', '');
    ELSIF v_run IS DISTINCT FROM v_p.runnable OR v_ready IS DISTINCT FROM v_p.ready_at THEN
        UPDATE stageq.processes SET runnable = v_run, ready_at = v_ready WHERE id = p_process_id;
    END IF;
END $$;

-- stageq.limit_admits says whether one more task with limit key p_key (NULL: none)
-- and kind p_kind may start now. It locks each limit row that applies (SKIP LOCKED:
-- a row another claim is admitting under counts as full for this claim, so the
-- claim never waits while it holds locks) and counts the running tasks in a new
-- statement, whose snapshot sees every claim that held the lock before. The locks
-- are kept to the end of the claim's transaction.
CREATE FUNCTION stageq.limit_admits(p_key text, p_kind text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_max int;
    v_n   int;
BEGIN
    IF p_key IS NOT NULL AND EXISTS (SELECT 1 FROM stageq.limits WHERE key = p_key) THEN
        SELECT max_running INTO v_max FROM stageq.limits WHERE key = p_key FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
        SELECT count(*) INTO v_n FROM stageq.tasks WHERE limit_key = p_key AND state = 'running';
        IF v_n >= v_max THEN
            RETURN false;
        END IF;
    END IF;
    IF EXISTS (SELECT 1 FROM stageq.limits WHERE key = 'kind:' || p_kind) THEN
        SELECT max_running INTO v_max FROM stageq.limits WHERE key = 'kind:' || p_kind FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
        SELECT count(*) INTO v_n FROM stageq.tasks WHERE kind = p_kind AND state = 'running';
        IF v_n >= v_max THEN
            RETURN false;
        END IF;
    END IF;
    RETURN true;
END $$;

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
CREATE FUNCTION stageq.claim(p_max int, p_worker text, p_token bigint, p_lease_ms bigint)
RETURNS SETOF stageq.tasks
LANGUAGE plpgsql
SET enable_sort = off
AS $$
DECLARE
    v_limits    boolean := EXISTS (SELECT 1 FROM stageq.limits);
    v_claimed   int := 0;
    v_turns     int := 0;
    v_locked    boolean := false;
    v_skip      bigint[] := '{}';
    v_head      bigint;
    v_head_pass bigint;
    v_waited    boolean;
    v_top       int;
    v_pid       bigint;
    v_pass      bigint;
    v_weight    int;
    v_maxpar    int;
    v_stride    bigint;
    v_next      bigint;
    v_take      int;
    v_got       int;
    v_min       bigint;
    v_cand      record;
    v_task      stageq.tasks;
BEGIN
    WHILE v_claimed < p_max AND v_turns < p_max + 8 LOOP
        v_turns := v_turns + 1;
        -- The head of the run queue, unlocked: its priority is the only one this
        -- turn may serve, so a busy higher-priority process is never passed
        -- over for a lower one.
        SELECT p.id, p.priority, p.pass INTO v_head, v_top, v_head_pass FROM stageq.processes p
         WHERE p.runnable AND p.ready_at <= now() AND p.id <> ALL (v_skip)
         ORDER BY p.priority DESC, p.pass, p.id
         LIMIT 1;
        EXIT WHEN NOT FOUND;
        v_waited := false;
        IF NOT v_locked THEN
            -- Holding no lock yet, wait briefly for the head itself: claims that
            -- race then serve processes in stride order, which keeps weights
            -- close under many workers (skipping a busy head hands its turn to
            -- the next process). Waiting while holding nothing cannot be part
            -- of a deadlock. The wait is bounded: a submission that keeps the
            -- process row locked in a long transaction of its own must not
            -- stall the claims of every other process. FOR UPDATE re-checks the
            -- row once it is ours: if another claim served it meanwhile (its
            -- pass moved), it is no longer the head, and this claim goes on
            -- without waiting again (the wait may have left it holding that row).
            BEGIN
                SET LOCAL lock_timeout = '50ms';
                SELECT p.id, p.pass, p.weight, p.max_parallel INTO v_pid, v_pass, v_weight, v_maxpar
                  FROM stageq.processes p
                 WHERE p.id = v_head AND p.pass = v_head_pass AND p.runnable AND p.ready_at <= now()
                   FOR UPDATE;
                v_waited := FOUND;
                SET LOCAL lock_timeout TO DEFAULT;
            EXCEPTION WHEN lock_not_available THEN
                v_waited := false; -- held elsewhere for long: serve the others
            END;
            v_locked := true;
        END IF;
        IF NOT v_waited THEN
            -- Holding locks, never wait: take the next free process of the
            -- head's priority (priority is strict; SKIP LOCKED only rotates
            -- among equals), or return what we have.
            SELECT p.id, p.pass, p.weight, p.max_parallel INTO v_pid, v_pass, v_weight, v_maxpar
              FROM stageq.processes p
             WHERE p.runnable AND p.ready_at <= now() AND p.id <> ALL (v_skip) AND p.priority = v_top
             ORDER BY p.priority DESC, p.pass, p.id
             LIMIT 1
               FOR UPDATE SKIP LOCKED;
            EXIT WHEN NOT FOUND;
        END IF;
        v_locked := true;
        v_stride := 1000000 / v_weight;

        -- This turn's share: the tasks it may take before its pass passes the
        -- next process's of the same priority (all that is asked when alone).
        v_take := p_max - v_claimed;
        SELECT p.pass INTO v_next FROM stageq.processes p
         WHERE p.runnable AND p.ready_at <= now() AND p.priority = v_top
           AND p.id <> v_pid AND p.id <> ALL (v_skip)
         ORDER BY p.priority DESC, p.pass, p.id
         LIMIT 1;
        IF FOUND THEN
            v_take := least(v_take, greatest(1, (v_next - v_pass) / v_stride + 1)::int);
        END IF;
        IF v_maxpar IS NOT NULL THEN
            v_take := least(v_take, v_maxpar - (SELECT count(*) FROM stageq.tasks
                                                 WHERE process_id = v_pid AND state = 'running')::int);
        END IF;

        -- The process row lock keeps every other writer off this process's
        -- available tasks, so the candidates need no row locks of their own.
        v_got := 0;
        IF v_take > 0 AND NOT v_limits THEN
            FOR v_task IN
                UPDATE stageq.tasks t
                   SET state = 'running', attempt = t.attempt + 1, worker_id = p_worker,
                       lease_token = p_token, lease_expires_at = now() + p_lease_ms * interval '1 millisecond'
                 WHERE t.id IN (SELECT c.id FROM stageq.tasks c
                                 WHERE c.process_id = v_pid AND c.state = 'available' AND c.run_at <= now()
                                 ORDER BY c.priority DESC, c.run_at, c.id
                                 LIMIT v_take)
                RETURNING t.*
            LOOP
                RETURN NEXT v_task;
                v_got := v_got + 1;
            END LOOP;
        ELSIF v_take > 0 THEN
            FOR v_cand IN
                SELECT t.id, t.kind, t.limit_key FROM stageq.tasks t
                 WHERE t.process_id = v_pid AND t.state = 'available' AND t.run_at <= now()
                 ORDER BY t.priority DESC, t.run_at, t.id
                 LIMIT v_take + 8
            LOOP
                CONTINUE WHEN NOT stageq.limit_admits(v_cand.limit_key, v_cand.kind);
                UPDATE stageq.tasks t
                   SET state = 'running', attempt = t.attempt + 1, worker_id = p_worker,
                       lease_token = p_token, lease_expires_at = now() + p_lease_ms * interval '1 millisecond'
                 WHERE t.id = v_cand.id
                RETURNING t.* INTO v_task;
                RETURN NEXT v_task;
                v_got := v_got + 1;
                EXIT WHEN v_got >= v_take;
            END LOOP;
        END IF;
        v_claimed := v_claimed + v_got;

        IF v_got > 0 THEN
            UPDATE stageq.processes SET pass = pass + v_got * v_stride WHERE id = v_pid;
        ELSE
            -- Nothing it may start now: it loses this turn and goes to the end of
            -- the current round (idempotent, so waiting never inflates its pass).
            v_skip := v_skip || v_pid;
            SELECT pass INTO v_min FROM stageq.processes WHERE runnable ORDER BY pass LIMIT 1;
            UPDATE stageq.processes SET pass = greatest(pass, coalesce(v_min, pass) + v_stride)
             WHERE id = v_pid;
        END IF;
        PERFORM stageq.refresh_process(v_pid);
    END LOOP;
END $$;

-- stageq.open_stage re-derives which tasks of a locked process may run: the tasks
-- of its lowest order become 'available', higher ones 'blocked'. It is called with
-- the process row locked, by submit (a lower order may arrive) and by finish and
-- rescue (the last task of a stage may have left). Every statement is a seek on
-- tasks_stage or tasks_failed, whatever the size of the process.
CREATE FUNCTION stageq.open_stage(p_process_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_old int;
    v_new int;
    v_failed boolean;
BEGIN
    SELECT current_order INTO v_old FROM stageq.processes WHERE id = p_process_id;
    SELECT t.execution_order INTO v_new FROM stageq.tasks t
     WHERE t.process_id = p_process_id ORDER BY t.execution_order LIMIT 1;

    IF v_new IS NULL THEN
        UPDATE stageq.processes
           SET current_order = NULL, state = 'succeeded', updated_at = now(), finished_at = now(),
               runnable = false, ready_at = NULL
         WHERE id = p_process_id;
        RETURN;
    END IF;

    IF v_old IS NOT NULL AND v_new < v_old THEN
        -- A lower order arrived: tasks above it that have not started wait again.
        UPDATE stageq.tasks SET state = 'blocked'
         WHERE process_id = p_process_id AND execution_order > v_new AND state = 'available';
    END IF;

    IF v_old IS DISTINCT FROM v_new THEN
        UPDATE stageq.tasks SET state = 'available'
         WHERE process_id = p_process_id AND execution_order = v_new AND state = 'blocked';
    END IF;

    v_failed := EXISTS (SELECT 1 FROM stageq.tasks WHERE process_id = p_process_id AND state = 'failed');
    UPDATE stageq.processes
       SET current_order = v_new,
           state = CASE WHEN v_failed THEN 'failed' ELSE 'active' END,
           updated_at = now(), finished_at = NULL
     WHERE id = p_process_id
       AND (current_order IS DISTINCT FROM v_new OR state <> CASE WHEN v_failed THEN 'failed' ELSE 'active' END
            OR finished_at IS NOT NULL);
    PERFORM stageq.refresh_process(p_process_id);
END $$;

-- stageq.submit inserts a batch of tasks into one process in the caller's
-- transaction. p_tasks is a JSON array of objects:
--   {"execution_order": int, "body": text, "kind": text, "max_attempts": int,
--    "priority": int, "atomic": bool, "run_at": timestamptz, "delay_ms": bigint,
--    "limit_key": text}
-- Returns the new task ids in the order given.
CREATE FUNCTION stageq.submit(p_process text, p_tasks jsonb)
RETURNS TABLE (process_id bigint, task_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_pid  bigint;
    v_cur  int;
    v_min  int;
    v_open int;
    v_bad  record;
BEGIN
    IF p_process IS NULL OR p_process = '' THEN
        RAISE EXCEPTION 'stageq: process name must not be empty' USING ERRCODE = '22023';
    END IF;
    IF length(p_process) > 200 THEN
        RAISE EXCEPTION 'stageq: process name is longer than 200 characters' USING ERRCODE = '22023';
    END IF;
    IF p_tasks IS NULL OR jsonb_typeof(p_tasks) <> 'array' OR jsonb_array_length(p_tasks) = 0 THEN
        RAISE EXCEPTION 'stageq: a submission needs at least one task' USING ERRCODE = '22023';
    END IF;

    SELECT x.ord, x.t INTO v_bad
      FROM jsonb_array_elements(p_tasks) WITH ORDINALITY AS x(t, ord)
     WHERE jsonb_typeof(x.t -> 'execution_order') IS DISTINCT FROM 'number'
        OR (x.t ->> 'execution_order')::numeric < 0
        OR (x.t ->> 'execution_order')::numeric <> trunc((x.t ->> 'execution_order')::numeric)
        OR (x.t ->> 'execution_order')::numeric > 2147483647
        OR coalesce(x.t ->> 'body', '') = ''
        OR coalesce((x.t ->> 'max_attempts')::int, 3) < 1
        OR coalesce(x.t ->> 'kind', 'sql') = ''
        OR x.t ->> 'limit_key' = ''
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'stageq: task % is invalid: execution_order must be a whole number >= 0, body must not be empty, max_attempts must be >= 1, limit_key must not be empty (got %)',
            v_bad.ord, v_bad.t USING ERRCODE = '22023';
    END IF;

    SELECT p.id, p.current_order INTO v_pid, v_cur
      FROM stageq.processes p WHERE p.name = p_process FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO stageq.processes (name) VALUES (p_process) ON CONFLICT (name) DO NOTHING;
        SELECT p.id, p.current_order INTO v_pid, v_cur
          FROM stageq.processes p WHERE p.name = p_process FOR UPDATE;
    END IF;
    SELECT min(x.execution_order) INTO v_min
      FROM jsonb_to_recordset(p_tasks) AS x(execution_order int);
    v_open := least(coalesce(v_cur, v_min), v_min);

    RETURN QUERY
    WITH ins AS (
        INSERT INTO stageq.tasks (process_id, execution_order, kind, body, state, priority,
                                  max_attempts, atomic, run_at, limit_key)
        SELECT v_pid, x.execution_order, coalesce(x.kind, 'sql'), x.body,
               CASE WHEN x.execution_order = v_open THEN 'available' ELSE 'blocked' END,
               coalesce(x.priority, 0), coalesce(x.max_attempts, 3), coalesce(x.atomic, false),
               coalesce(x.run_at, now() + coalesce(x.delay_ms, 0) * interval '1 millisecond'),
               x.limit_key
          FROM jsonb_to_recordset(p_tasks)
               AS x(execution_order int, kind text, body text, priority int, max_attempts int,
                    atomic boolean, run_at timestamptz, delay_ms bigint, limit_key text)
        RETURNING stageq.tasks.id
    )
    SELECT v_pid, ins.id FROM ins ORDER BY ins.id;

    PERFORM stageq.open_stage(v_pid);
    PERFORM pg_notify('stageq_tasks', '');
END $$;

-- stageq.enqueue is the SQL API for one task, the seed's ExecAsync done right:
--   SELECT stageq.enqueue('CALL etl.load()', 200);
--   SELECT stageq.enqueue('CALL etl.load()', 200, process => 'nightly', max_attempts => 5);
-- It returns the new task's id and commits with the caller's transaction.
CREATE FUNCTION stageq.enqueue(
    body            text,
    execution_order int         DEFAULT 0,
    process         text        DEFAULT 'default',
    max_attempts    int         DEFAULT 3,
    priority        int         DEFAULT 0,
    run_at          timestamptz DEFAULT NULL,
    atomic          boolean     DEFAULT false,
    kind            text        DEFAULT 'sql',
    limit_key       text        DEFAULT NULL
) RETURNS bigint
LANGUAGE sql AS $$
    SELECT s.task_id FROM stageq.submit(
        enqueue.process,
        jsonb_build_array(jsonb_build_object(
            'execution_order', enqueue.execution_order, 'body', enqueue.body, 'kind', enqueue.kind,
            'max_attempts', enqueue.max_attempts, 'priority', enqueue.priority,
            'atomic', enqueue.atomic, 'run_at', enqueue.run_at, 'limit_key', enqueue.limit_key))) AS s
$$;

-- stageq.finish ends an attempt, fenced by the lease token. p_outcome is
-- 'succeeded', 'failed' or 'released'; with 'failed', p_retry_ms > 0 schedules
-- another attempt and NULL fails the task for good. Returns false, changing
-- nothing, when the token no longer holds the task.
CREATE FUNCTION stageq.finish(p_task_id bigint, p_token bigint, p_outcome text,
                              p_error text, p_retry_ms bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_pid bigint;
    v_retry_at timestamptz;
    v_back text; -- the state of a task handed back: its stage may no longer be the open one
BEGIN
    SELECT t.process_id INTO v_pid FROM stageq.tasks t
     WHERE t.id = p_task_id AND t.lease_token = p_token AND t.state = 'running';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- Lock order everywhere: process row, then task rows.
    SELECT CASE WHEN p.current_order = t.execution_order THEN 'available' ELSE 'blocked' END INTO v_back
      FROM stageq.processes p JOIN stageq.tasks t ON t.process_id = p.id
     WHERE p.id = v_pid AND t.id = p_task_id
       FOR UPDATE OF p;

    IF p_outcome = 'succeeded' THEN
        DELETE FROM stageq.tasks WHERE id = p_task_id AND lease_token = p_token AND state = 'running';
    ELSIF p_outcome = 'released' THEN
        UPDATE stageq.tasks
           SET state = v_back, attempt = attempt - 1, run_at = now(),
               worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
         WHERE id = p_task_id AND lease_token = p_token AND state = 'running';
    ELSIF p_outcome = 'failed' AND p_retry_ms IS NOT NULL AND p_retry_ms > 0 THEN
        v_retry_at := clock_timestamp() + p_retry_ms * interval '1 millisecond';
        UPDATE stageq.tasks
           SET state = v_back, run_at = v_retry_at, last_error = p_error,
               worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
         WHERE id = p_task_id AND lease_token = p_token AND state = 'running';
    ELSIF p_outcome = 'failed' THEN
        UPDATE stageq.tasks
           SET state = 'failed', last_error = p_error,
               worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
         WHERE id = p_task_id AND lease_token = p_token AND state = 'running';
    ELSE
        RAISE EXCEPTION 'stageq.finish: unknown outcome %', p_outcome USING ERRCODE = '22023';
    END IF;
    IF NOT FOUND THEN
        RETURN false; -- rescued between the read and the lock
    END IF;

    UPDATE stageq.logs
       SET ended_at = clock_timestamp(),
           duration_ms = (extract(epoch FROM clock_timestamp() - started_at) * 1000)::bigint,
           outcome = p_outcome, error = p_error, retry_at = v_retry_at
     WHERE task_id = p_task_id AND lease_token = p_token;

    PERFORM stageq.open_stage(v_pid);
    RETURN true;
END $$;

-- stageq.finish_many ends many attempts in one transaction, as stageq.finish
-- does one: p_ids, p_tokens, p_outcomes, p_errors and p_retry_ms are parallel
-- arrays. It returns the ids whose token still held; the others changed nothing.
-- The process rows are locked first, in ascending id order, so two batches
-- never wait on each other in a cycle; each process's stage is then re-derived
-- once for the whole batch. This is the worker's path: one round trip for as
-- many results as finished while the previous batch was being recorded.
CREATE FUNCTION stageq.finish_many(p_ids bigint[], p_tokens bigint[], p_outcomes text[],
                                   p_errors text[], p_retry_ms bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_pid  bigint;
    v_ids  bigint[];
    v_pids bigint[];
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(p_outcomes) o WHERE o NOT IN ('succeeded', 'failed', 'released')) THEN
        RAISE EXCEPTION 'stageq.finish_many: unknown outcome in %', p_outcomes USING ERRCODE = '22023';
    END IF;
    PERFORM 1 FROM stageq.processes p
     WHERE p.id IN (SELECT t.process_id FROM stageq.tasks t
                     WHERE t.id = ANY (p_ids) AND t.state = 'running')
     ORDER BY p.id
       FOR UPDATE;

    WITH r AS (
        SELECT * FROM unnest(p_ids, p_tokens, p_outcomes, p_errors, p_retry_ms)
                   AS r(id, token, outcome, error, retry_ms)
    ), done AS (
        DELETE FROM stageq.tasks t USING r
         WHERE t.id = r.id AND t.lease_token = r.token AND t.state = 'running' AND r.outcome = 'succeeded'
        RETURNING t.id, t.process_id, NULL::timestamptz AS retry_at
    ), back AS (
        -- A task handed back is available only if its stage is still the open one.
        UPDATE stageq.tasks t
           SET state = CASE WHEN r.outcome = 'failed' AND coalesce(r.retry_ms, 0) <= 0 THEN 'failed'
                            WHEN t.execution_order = p.current_order THEN 'available'
                            ELSE 'blocked' END,
               attempt = CASE WHEN r.outcome = 'released' THEN t.attempt - 1 ELSE t.attempt END,
               run_at = CASE WHEN r.outcome = 'released' THEN now()
                             WHEN r.outcome = 'failed' AND r.retry_ms > 0
                             THEN clock_timestamp() + r.retry_ms * interval '1 millisecond'
                             ELSE t.run_at END,
               last_error = CASE WHEN r.outcome = 'failed' THEN nullif(r.error, '') ELSE t.last_error END,
               worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
          FROM r, stageq.processes p
         WHERE t.id = r.id AND t.lease_token = r.token AND t.state = 'running'
           AND r.outcome <> 'succeeded' AND p.id = t.process_id
        RETURNING t.id, t.process_id,
                  CASE WHEN r.outcome = 'failed' AND r.retry_ms > 0 THEN t.run_at END AS retry_at
    ), ended AS (
        SELECT * FROM done UNION ALL SELECT * FROM back
    ), logged AS (
        UPDATE stageq.logs l
           SET ended_at = clock_timestamp(),
               duration_ms = (extract(epoch FROM clock_timestamp() - l.started_at) * 1000)::bigint,
               outcome = r.outcome, error = nullif(r.error, ''), retry_at = e.retry_at
          FROM ended e JOIN r ON r.id = e.id
         WHERE l.task_id = e.id AND l.lease_token = r.token
    )
    SELECT array_agg(e.id), array_agg(DISTINCT e.process_id) INTO v_ids, v_pids FROM ended e;

    IF v_pids IS NOT NULL THEN
        FOREACH v_pid IN ARRAY v_pids LOOP
            PERFORM stageq.open_stage(v_pid);
        END LOOP;
    END IF;
    RETURN QUERY SELECT unnest(v_ids);
END $$;

-- stageq.rescue returns up to p_max tasks whose lease expired to the queue, or
-- fails them when they are out of attempts, and closes their Logs rows as abandoned.
CREATE FUNCTION stageq.rescue(p_max int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n int := 0;
BEGIN
    FOR r IN
        SELECT e.* FROM (
            SELECT t.id, t.process_id, t.lease_token, t.worker_id
              FROM stageq.tasks t
             WHERE t.state = 'running' AND t.lease_expires_at < clock_timestamp()
             ORDER BY t.lease_expires_at
             LIMIT p_max) e
         ORDER BY e.process_id
    LOOP
        -- Process rows in id order, as stageq.finish_many takes them, and never
        -- waiting: a process busy elsewhere is rescued by a later pass.
        PERFORM 1 FROM stageq.processes WHERE id = r.process_id FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        UPDATE stageq.tasks
           SET state = CASE WHEN attempt >= max_attempts THEN 'failed'
                            WHEN execution_order = (SELECT current_order FROM stageq.processes WHERE id = r.process_id)
                            THEN 'available' ELSE 'blocked' END,
               run_at = now(),
               last_error = 'lease expired: worker ' || r.worker_id || ' stopped extending it',
               worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
         WHERE id = r.id AND lease_token = r.lease_token AND state = 'running'
           AND lease_expires_at < clock_timestamp();
        IF FOUND THEN
            UPDATE stageq.logs
               SET ended_at = clock_timestamp(),
                   duration_ms = (extract(epoch FROM clock_timestamp() - started_at) * 1000)::bigint,
                   outcome = 'abandoned',
                   error = 'lease expired: worker ' || r.worker_id || ' stopped extending it'
             WHERE task_id = r.id AND lease_token = r.lease_token;
            PERFORM stageq.open_stage(r.process_id);
            n := n + 1;
        END IF;
    END LOOP;
    IF n > 0 THEN
        PERFORM pg_notify('stageq_tasks', '');
    END IF;
    RETURN n;
END $$;
