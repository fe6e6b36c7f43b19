-- Fair scheduling across processes and cluster-wide concurrency limits.
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
-- takes process and limit rows with SKIP LOCKED and only ever waits for a lock
-- while it holds none, so it cannot deadlock with finish, submit or rescue.

ALTER TABLE stageq.processes
    ADD COLUMN priority     int         NOT NULL DEFAULT 0,
    ADD COLUMN weight       int         NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000),
    ADD COLUMN max_parallel int         CHECK (max_parallel >= 1),
    ADD COLUMN paused       boolean     NOT NULL DEFAULT false,
    -- Stride scheduling's virtual time: lower is served first.
    ADD COLUMN pass         bigint      NOT NULL DEFAULT 0,
    -- Maintained by stageq.refresh_process under the process row lock.
    ADD COLUMN runnable     boolean     NOT NULL DEFAULT false,
    -- The earliest run_at among the process's available tasks.
    ADD COLUMN ready_at     timestamptz;

ALTER TABLE stageq.tasks
    ADD COLUMN limit_key text CHECK (limit_key <> '' AND length(limit_key) <= 200);

-- A named limit ('erp-api') caps the running tasks whose limit_key is the name;
-- 'kind:<kind>' caps the running tasks of a kind. A key without a row is unlimited.
-- (A process's own cap is processes.max_parallel.)
CREATE TABLE stageq.limits (
    key         text        PRIMARY KEY CHECK (key <> '' AND length(key) <= 200),
    max_running int         NOT NULL CHECK (max_running >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The claim now seeks per process; the global claim index has no reader left.
DROP INDEX stageq.tasks_claim;
CREATE INDEX tasks_claim_process ON stageq.tasks (process_id, priority DESC, run_at, id) WHERE state = 'available';
CREATE INDEX tasks_ready ON stageq.tasks (process_id, run_at) WHERE state = 'available';
-- Slot counts: running tasks per process, per limit key and per kind.
CREATE INDEX tasks_running_process ON stageq.tasks (process_id) WHERE state = 'running';
CREATE INDEX tasks_running_limit ON stageq.tasks (limit_key) WHERE state = 'running' AND limit_key IS NOT NULL;
CREATE INDEX tasks_running_kind ON stageq.tasks (kind) WHERE state = 'running';
-- The run queue, and its virtual time (the lowest pass) for processes that wake.
CREATE INDEX processes_queue ON stageq.processes (priority DESC, pass, id) WHERE runnable;
CREATE INDEX processes_vtime ON stageq.processes (pass) WHERE runnable;

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
-- writes their Logs rows in the same statement). Each round seeks the run queue
-- for the next process (priority, then lowest pass), locks it, takes one task of
-- it that its limits admit, and advances its pass: one task per process per
-- round is what makes a single claim of many tasks round robin too.
-- At most p_max + 8 processes are examined, so a run queue headed by processes
-- whose tasks all wait on full limits costs a bounded amount; such a process is
-- moved to the end of the current round so that later claims reach the others.
CREATE FUNCTION stageq.claim(p_max int, p_worker text, p_token bigint, p_lease_ms bigint)
RETURNS SETOF stageq.tasks
LANGUAGE plpgsql AS $$
DECLARE
    v_pid      bigint;
    v_weight   int;
    v_claimed  int := 0;
    v_rounds   int := 0;
    v_locked   boolean := false;
    v_skip     bigint[] := '{}';
    v_cand     record;
    v_task     stageq.tasks;
    v_got      boolean;
    v_min      bigint;
    v_head     bigint;
    v_top      int;
BEGIN
    WHILE v_claimed < p_max AND v_rounds < p_max + 8 LOOP
        v_rounds := v_rounds + 1;
        -- The head of the run queue, unlocked: its priority is the only one this
        -- round may serve, so a busy higher-priority process is never passed
        -- over for a lower one (priority is strict; SKIP LOCKED only rotates
        -- among equals).
        SELECT p.id, p.priority INTO v_head, v_top FROM stageq.processes p
         WHERE p.runnable AND p.ready_at <= now() AND p.id <> ALL (v_skip)
         ORDER BY p.priority DESC, p.pass, p.id
         LIMIT 1;
        EXIT WHEN NOT FOUND;
        SELECT p.id, p.weight INTO v_pid, v_weight FROM stageq.processes p
         WHERE p.runnable AND p.ready_at <= now() AND p.id <> ALL (v_skip) AND p.priority = v_top
         ORDER BY p.priority DESC, p.pass, p.id
         LIMIT 1
           FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            -- Every runnable process of that priority is locked by another claim
            -- or a finish. With no lock held yet it is safe to wait for the head
            -- (no cycle is possible); otherwise return what we have.
            EXIT WHEN v_locked;
            SELECT p.id, p.weight INTO v_pid, v_weight FROM stageq.processes p
             WHERE p.id = v_head AND p.runnable AND p.ready_at <= now()
               FOR UPDATE;
            EXIT WHEN NOT FOUND;
        END IF;
        v_locked := true;

        v_got := false;
        -- The process row lock keeps every other writer off this process's
        -- available tasks, so the candidates need no row locks of their own.
        FOR v_cand IN
            SELECT t.id, t.kind, t.limit_key FROM stageq.tasks t
             WHERE t.process_id = v_pid AND t.state = 'available' AND t.run_at <= now()
             ORDER BY t.priority DESC, t.run_at, t.id
             LIMIT 8
        LOOP
            CONTINUE WHEN NOT stageq.limit_admits(v_cand.limit_key, v_cand.kind);
            UPDATE stageq.tasks t
               SET state = 'running', attempt = t.attempt + 1, worker_id = p_worker,
                   lease_token = p_token, lease_expires_at = now() + p_lease_ms * interval '1 millisecond'
             WHERE t.id = v_cand.id
            RETURNING t.* INTO v_task;
            RETURN NEXT v_task;
            v_claimed := v_claimed + 1;
            v_got := true;
            EXIT;
        END LOOP;

        IF v_got THEN
            UPDATE stageq.processes SET pass = pass + 1000000 / v_weight WHERE id = v_pid;
        ELSE
            -- Nothing it may start now: it loses this turn and goes to the end of
            -- the current round (idempotent, so waiting never inflates its pass).
            v_skip := v_skip || v_pid;
            SELECT pass INTO v_min FROM stageq.processes WHERE runnable ORDER BY pass LIMIT 1;
            UPDATE stageq.processes SET pass = greatest(pass, coalesce(v_min, pass) + 1000000 / v_weight)
             WHERE id = v_pid;
        END IF;
        PERFORM stageq.refresh_process(v_pid);
    END LOOP;
END $$;

-- stageq.open_stage as in 000001, and then refresh_process: a stage that opens or
-- a task that leaves can make the process runnable or idle.
CREATE OR REPLACE FUNCTION stageq.open_stage(p_process_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_old int;
    v_new int;
    v_failed boolean;
BEGIN
    SELECT current_order INTO v_old FROM stageq.processes WHERE id = p_process_id;
    SELECT min(execution_order) INTO v_new FROM stageq.tasks WHERE process_id = p_process_id;

    IF v_new IS NULL THEN
        UPDATE stageq.processes
           SET current_order = NULL, state = 'succeeded', updated_at = now(), finished_at = now(),
               runnable = false, ready_at = NULL
         WHERE id = p_process_id;
        RETURN;
    END IF;

    IF v_old IS NOT NULL AND v_new < v_old THEN
        UPDATE stageq.tasks SET state = 'blocked'
         WHERE process_id = p_process_id AND execution_order > v_new AND state = 'available';
    END IF;

    IF v_old IS DISTINCT FROM v_new THEN
        UPDATE stageq.tasks SET state = 'available'
         WHERE process_id = p_process_id AND execution_order = v_new AND state = 'blocked';
        PERFORM pg_notify('stageq_tasks', '');
    END IF;

    SELECT EXISTS (SELECT 1 FROM stageq.tasks WHERE process_id = p_process_id AND state = 'failed')
      INTO v_failed;
    UPDATE stageq.processes
       SET current_order = v_new,
           state = CASE WHEN v_failed THEN 'failed' ELSE 'active' END,
           updated_at = now(), finished_at = NULL
     WHERE id = p_process_id;
    PERFORM stageq.refresh_process(p_process_id);
END $$;

-- stageq.submit as in 000001, and the task's limit key ("limit_key" in p_tasks).
CREATE OR REPLACE FUNCTION stageq.submit(p_process text, p_tasks jsonb)
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

-- Existing processes: derive their run-queue state once.
SELECT stageq.refresh_process(id) FROM stageq.processes;
