-- stageq 2: the hot path without a hot row.
--
-- Version 1 locked the process row in every claim (to advance its stride pass)
-- and in every completion (to re-derive its stage), and held it until the commit
-- was flushed: one process drained one transaction at a time. Here no claim and
-- no successful completion locks a shared row:
--
-- * Fairness is decided when a task becomes available, not when it is claimed.
--   Each available task carries a virtual time (weighted fair queuing): a process
--   with weight w gets tasks stamped base, base + s, base + 2s, ... with the
--   stride s = 1,000,000 / w, where base is the later of the queue's current
--   virtual time and the end of the process's own backlog (processes.vtail). A
--   claim takes the available tasks with the highest process priority and the
--   lowest virtual time (the start tag of start-time fair queuing), with FOR
--   UPDATE SKIP LOCKED, in one statement: equal
--   weights interleave processes round robin, weight 3 gets three tasks to weight
--   1's one, and a process that was idle joins at the current virtual time with
--   no burst credit.
-- * A successful completion deletes its task and closes its Logs row, and
--   nothing else. Whether it ended its stage is decided after it commits
--   (stageq.advance): whoever commits the last task of a stage sees none left,
--   locks the process row once, and opens the next stage. A crash between the
--   two is repaired by stageq.rescue, which every worker runs periodically.
-- * Tasks whose run_at lies ahead wait as 'scheduled' and are made available by
--   the claim once due, so the claim index holds only tasks that may start now.
-- * Limits (stageq.limits and processes.max_parallel) keep their locks: a limit
--   row is the one place where concurrent claims must agree. The claim takes the
--   lock-free path whenever no limit and no capped process exists.
--
-- Lock order is unchanged: process row, then limit rows, then task rows; a claim
-- never waits for a lock (SKIP LOCKED everywhere).

-- The queue's virtual clock: the newest virtual time stamped on a task. It is
-- the current virtual time when no task is available (a sequence: advancing it
-- takes no row lock and is not rolled back, so it never moves backwards).
CREATE SEQUENCE stageq.vclock MINVALUE 0 START 0;

ALTER TABLE stageq.processes
    ADD COLUMN vtail bigint NOT NULL DEFAULT 0; -- the virtual time of its last stamped task

DROP INDEX stageq.processes_queue;
DROP INDEX stageq.processes_vtime;
ALTER TABLE stageq.processes DROP COLUMN runnable, DROP COLUMN pass, DROP COLUMN ready_at;
-- The few processes that have a concurrency cap, and the unfinished ones (the
-- maintenance pass looks for stages that ended without being advanced).
CREATE INDEX processes_capped ON stageq.processes (id) WHERE max_parallel IS NOT NULL;
CREATE INDEX processes_open ON stageq.processes (id) WHERE state IN ('active', 'failed');

ALTER TABLE stageq.tasks
    ADD COLUMN vtime bigint NOT NULL DEFAULT 0,
    -- The process's priority, copied here so the claim is one index scan.
    ADD COLUMN process_priority int NOT NULL DEFAULT 0,
    DROP CONSTRAINT tasks_state_check,
    ADD CONSTRAINT tasks_state_check CHECK (state IN ('blocked', 'scheduled', 'available', 'running', 'failed'));

-- Fewer indexes per state change: a claim inserts into the primary key,
-- tasks_stage and tasks_running only (and tasks_running_limit for a task with a
-- limit key); a successful completion deletes and inserts into none.
-- (tasks_stage is the one index of every task by process: the foreign key's
-- check when a process is deleted, and the barrier, need it.)
DROP INDEX stageq.tasks_claim_process;
DROP INDEX stageq.tasks_ready;
DROP INDEX stageq.tasks_lease;
DROP INDEX stageq.tasks_worker;
DROP INDEX stageq.tasks_running_process;
DROP INDEX stageq.tasks_running_kind;
CREATE INDEX tasks_claim ON stageq.tasks (process_priority DESC, vtime, id) WHERE state = 'available';
CREATE INDEX tasks_due ON stageq.tasks (run_at) WHERE state = 'scheduled';
CREATE INDEX tasks_blocked ON stageq.tasks (process_id, execution_order) WHERE state = 'blocked';
-- Running tasks, by process: max_parallel counts them; rescue, kind limits and
-- worker listings scan them all, which is bounded by the cluster's concurrency.
CREATE INDEX tasks_running ON stageq.tasks (process_id) WHERE state = 'running';

-- Completions update the Logs row that the claim inserted: leave room on each
-- page so that the update stays on it (a HOT update touches no index).
ALTER TABLE stageq.logs SET (fillfactor = 80);
DROP INDEX stageq.logs_started;
CREATE INDEX logs_started ON stageq.logs USING brin (started_at);

DROP FUNCTION stageq.claim(int, text, bigint, bigint);
DROP FUNCTION stageq.finish(bigint, bigint, text, text, bigint);
DROP FUNCTION stageq.finish_many(bigint[], bigint[], text[], text[], bigint[]);
DROP FUNCTION stageq.rescue(int);
DROP FUNCTION stageq.open_stage(bigint);
DROP FUNCTION stageq.refresh_process(bigint);

-- stageq.vnow is the current virtual time for processes of priority p_priority:
-- the virtual time of the next task a claim would take at that priority, or the
-- clock when none is available.
CREATE FUNCTION stageq.vnow(p_priority int) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT coalesce(
        (SELECT t.vtime FROM stageq.tasks t
          WHERE t.state = 'available' AND t.process_priority = p_priority
          ORDER BY t.process_priority DESC, t.vtime, t.id LIMIT 1),
        (SELECT last_value FROM stageq.vclock))
$$;

-- stageq.stamp_base returns the virtual time from which a process's next tasks
-- are stamped: the current virtual time, or the end of its own backlog when it
-- still has tasks stamped ahead of it. The caller holds the process row lock and
-- then records the new end with stageq.stamp_done.
CREATE FUNCTION stageq.stamp_base(p_process_id bigint) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT greatest(stageq.vnow(p.priority), p.vtail) FROM stageq.processes p WHERE p.id = p_process_id
$$;

CREATE FUNCTION stageq.stamp_done(p_process_id bigint, p_vtail bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE stageq.processes SET vtail = greatest(vtail, p_vtail) WHERE id = p_process_id;
    IF p_vtail > (SELECT last_value FROM stageq.vclock) THEN
        PERFORM setval('stageq.vclock', p_vtail);
    END IF;
END $$;

-- stageq.open_stage re-derives which tasks of a locked process may run: the tasks
-- of its lowest order become available (or scheduled, when their run_at lies
-- ahead), stamped with their virtual times; higher ones stay blocked. A paused
-- process has nothing available. Called with the process row locked, by submit
-- (a lower order may arrive), stageq.advance (a stage may have ended), rescue and
-- the operator's commands. Every statement is a seek on tasks_stage,
-- tasks_blocked or tasks_failed, whatever the size of the process.
CREATE FUNCTION stageq.open_stage(p_process_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_p      record;
    v_new    int;
    v_failed boolean;
    v_base   bigint;
    v_stride bigint;
    v_n      bigint;
BEGIN
    SELECT current_order, paused, weight, priority INTO v_p FROM stageq.processes WHERE id = p_process_id;
    SELECT t.execution_order INTO v_new FROM stageq.tasks t
     WHERE t.process_id = p_process_id ORDER BY t.execution_order LIMIT 1;

    IF v_new IS NULL THEN
        UPDATE stageq.processes
           SET current_order = NULL, state = 'succeeded', updated_at = now(), finished_at = now()
         WHERE id = p_process_id AND state IN ('active', 'failed');
        RETURN;
    END IF;

    IF v_p.paused THEN
        UPDATE stageq.tasks SET state = 'blocked'
         WHERE process_id = p_process_id AND state IN ('available', 'scheduled');
    ELSE
        IF v_p.current_order IS NOT NULL AND v_new < v_p.current_order THEN
            -- A lower order arrived: tasks above it that have not started wait again.
            UPDATE stageq.tasks SET state = 'blocked'
             WHERE process_id = p_process_id AND execution_order > v_new
               AND state IN ('available', 'scheduled');
        END IF;
        -- Open the stage: its blocked tasks take their turns from the current
        -- virtual time, in their own priority order.
        v_stride := 1000000 / v_p.weight;
        v_base := stageq.stamp_base(p_process_id);
        WITH b AS (
            SELECT t.id, row_number() OVER (ORDER BY t.priority DESC, t.run_at, t.id) AS rk
              FROM stageq.tasks t
             WHERE t.process_id = p_process_id AND t.execution_order = v_new AND t.state = 'blocked'
        ), opened AS (
            UPDATE stageq.tasks t
               SET state = CASE WHEN t.run_at > now() THEN 'scheduled' ELSE 'available' END,
                   vtime = v_base + (b.rk - 1) * v_stride, process_priority = v_p.priority
              FROM b WHERE t.id = b.id
            RETURNING 1
        )
        SELECT count(*) INTO v_n FROM opened;
        IF v_n > 0 THEN
            PERFORM stageq.stamp_done(p_process_id, v_base + v_n * v_stride);
            PERFORM pg_notify('stageq_tasks', '');
        END IF;
    END IF;

    v_failed := EXISTS (SELECT 1 FROM stageq.tasks WHERE process_id = p_process_id AND state = 'failed');
    UPDATE stageq.processes
       SET current_order = v_new,
           state = CASE WHEN v_failed THEN 'failed' ELSE 'active' END,
           updated_at = now(), finished_at = NULL
     WHERE id = p_process_id
       AND (current_order IS DISTINCT FROM v_new OR state <> CASE WHEN v_failed THEN 'failed' ELSE 'active' END
            OR finished_at IS NOT NULL);
END $$;

-- stageq.advance is the second half of a completion, run after it committed:
-- for each process given, if its current stage has no task left (or a task
-- failed for good and the process does not say so yet), it locks the process
-- row and re-derives its stage. Committing the last task of a stage and then
-- looking means that of two completions racing for a stage's last two tasks, at
-- least the one that committed last sees none left. Idempotent. It never waits:
-- it returns the processes whose row another transaction holds (a submission
-- still open, say), for the caller to try again shortly.
CREATE FUNCTION stageq.advance(p_process_ids bigint[]) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_pid bigint;
BEGIN
    FOR v_pid IN
        SELECT p.id FROM stageq.processes p
         WHERE p.id = ANY (p_process_ids) AND p.state IN ('active', 'failed')
           AND (NOT EXISTS (SELECT 1 FROM stageq.tasks t
                             WHERE t.process_id = p.id AND t.execution_order = p.current_order)
                OR (p.state = 'active' AND EXISTS (SELECT 1 FROM stageq.tasks t
                                                    WHERE t.process_id = p.id AND t.state = 'failed')))
         ORDER BY p.id
    LOOP
        PERFORM 1 FROM stageq.processes WHERE id = v_pid FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            PERFORM stageq.open_stage(v_pid);
        ELSE
            RETURN NEXT v_pid;
        END IF;
    END LOOP;
END $$;

-- stageq.submit inserts a batch of tasks into one process in the caller's
-- transaction. p_tasks is a JSON array of objects:
--   {"execution_order": int, "body": text, "kind": text, "max_attempts": int,
--    "priority": int, "atomic": bool, "run_at": timestamptz, "delay_ms": bigint,
--    "limit_key": text}
-- Returns the new task ids in the order given. Tasks of the stage that is open
-- are stamped with their virtual times here; the others when it opens.
CREATE OR REPLACE FUNCTION stageq.submit(p_process text, p_tasks jsonb)
RETURNS TABLE (process_id bigint, task_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_p      record;
    v_pid    bigint;
    v_min    int;
    v_open   int;
    v_base   bigint;
    v_stride bigint;
    v_n      bigint;
BEGIN
    PERFORM stageq.validate_tasks(p_process, p_tasks);

    SELECT p.id INTO v_pid FROM stageq.processes p WHERE p.name = p_process FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO stageq.processes (name) VALUES (p_process) ON CONFLICT (name) DO NOTHING;
        SELECT p.id INTO v_pid FROM stageq.processes p WHERE p.name = p_process FOR UPDATE;
    END IF;
    SELECT p.current_order, p.paused, p.weight, p.priority INTO v_p FROM stageq.processes p WHERE p.id = v_pid;
    SELECT min(x.execution_order) INTO v_min FROM jsonb_to_recordset(p_tasks) AS x(execution_order int);
    v_open := CASE WHEN v_p.paused THEN NULL ELSE least(coalesce(v_p.current_order, v_min), v_min) END;
    v_stride := 1000000 / v_p.weight;
    v_base := stageq.stamp_base(v_pid);

    RETURN QUERY
    WITH x AS (
        SELECT x.*, coalesce(x.run_at, now() + coalesce(x.delay_ms, 0) * interval '1 millisecond') AS start_at,
               row_number() OVER (PARTITION BY x.execution_order = v_open
                                  ORDER BY coalesce(x.priority, 0) DESC, x.ord) AS rk
          FROM ROWS FROM (jsonb_to_recordset(p_tasks)
                          AS (execution_order int, kind text, body text, priority int, max_attempts int,
                              atomic boolean, run_at timestamptz, delay_ms bigint, limit_key text))
               WITH ORDINALITY
               AS x(execution_order, kind, body, priority, max_attempts, atomic, run_at, delay_ms, limit_key, ord)
    ), ins AS (
        INSERT INTO stageq.tasks (process_id, execution_order, kind, body, state, priority,
                                  max_attempts, atomic, run_at, limit_key, vtime, process_priority)
        SELECT v_pid, x.execution_order, coalesce(x.kind, 'sql'), x.body,
               CASE WHEN x.execution_order IS DISTINCT FROM v_open THEN 'blocked'
                    WHEN x.start_at > now() THEN 'scheduled' ELSE 'available' END,
               coalesce(x.priority, 0), coalesce(x.max_attempts, 3), coalesce(x.atomic, false),
               x.start_at, x.limit_key,
               CASE WHEN x.execution_order = v_open THEN v_base + (x.rk - 1) * v_stride ELSE 0 END,
               v_p.priority
          FROM x ORDER BY x.ord
        RETURNING stageq.tasks.id
    )
    SELECT v_pid, ins.id FROM ins ORDER BY ins.id;

    SELECT count(*) INTO v_n FROM jsonb_to_recordset(p_tasks) AS x(execution_order int)
     WHERE x.execution_order = v_open;
    IF v_n > 0 THEN
        PERFORM stageq.stamp_done(v_pid, v_base + v_n * v_stride);
    END IF;
    PERFORM stageq.open_stage(v_pid);
    PERFORM pg_notify('stageq_tasks', '');
END $$;

-- stageq.validate_tasks raises 22023 (invalid_parameter_value) for a submission
-- the queue must refuse; stageq.submit calls it before writing anything.
CREATE FUNCTION stageq.validate_tasks(p_process text, p_tasks jsonb) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_bad record;
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
END $$;

-- stageq.claim leases up to p_max available tasks to worker p_worker with token
-- p_token for p_lease_ms and returns them (the caller opens their Logs rows in
-- the same statement).
--
-- First, scheduled tasks that are due become available, stamped from the
-- current virtual time (a process's delayed tasks take turns with the others
-- instead of arriving as a burst). Then the claim serves the highest process
-- priority that has available tasks, and a lower one only once that priority
-- has none left that this claim could take: priority stays strict even while
-- another claim holds the higher tasks' row locks (that claim will take them).
--
-- When no limit row and no capped process exists, a priority level is served
-- by one UPDATE of the head of tasks_claim with FOR UPDATE SKIP LOCKED: no
-- shared row is locked, so claims and completions of one process run side by
-- side. Otherwise (stageq.claim_gated) each candidate is admitted one by one.
--
-- enable_sort = off: every query here has an index in its ORDER BY's order.
CREATE FUNCTION stageq.claim(p_max int, p_worker text, p_token bigint, p_lease_ms bigint)
RETURNS SETOF stageq.tasks
LANGUAGE plpgsql
SET enable_sort = off
AS $$
DECLARE
    v_expires timestamptz := now() + p_lease_ms * interval '1 millisecond';
    v_got     int := 0;
    v_n       int;
    v_top     int;
    v_task    stageq.tasks;
BEGIN
    IF EXISTS (SELECT 1 FROM stageq.tasks WHERE state = 'scheduled' AND run_at <= now()) THEN
        WITH due AS (
            SELECT t.id, t.process_id FROM stageq.tasks t
             WHERE t.state = 'scheduled' AND t.run_at <= now()
             ORDER BY t.run_at LIMIT 1000
               FOR UPDATE SKIP LOCKED
        ), ranked AS (
            SELECT d.id, stageq.vnow(p.priority)
                         + (row_number() OVER (PARTITION BY d.process_id ORDER BY d.id) - 1) * (1000000 / p.weight) AS vt
              FROM due d JOIN stageq.processes p ON p.id = d.process_id
        )
        UPDATE stageq.tasks t SET state = 'available', vtime = r.vt
          FROM ranked r WHERE t.id = r.id;
    END IF;

    IF EXISTS (SELECT 1 FROM stageq.limits)
       OR EXISTS (SELECT 1 FROM stageq.processes WHERE max_parallel IS NOT NULL) THEN
        RETURN QUERY SELECT * FROM stageq.claim_gated(p_max, p_worker, p_token, v_expires);
        RETURN;
    END IF;

    LOOP
        -- The head's priority, locked or not: its tasks go first.
        SELECT t.process_priority INTO v_top FROM stageq.tasks t
         WHERE t.state = 'available'
         ORDER BY t.process_priority DESC, t.vtime, t.id LIMIT 1;
        EXIT WHEN NOT FOUND;
        v_n := 0;
        FOR v_task IN
            WITH c AS MATERIALIZED (
                SELECT t.id FROM stageq.tasks t
                 WHERE t.state = 'available' AND t.process_priority = v_top
                 ORDER BY t.process_priority DESC, t.vtime, t.id
                 LIMIT p_max - v_got
                   FOR UPDATE SKIP LOCKED
            )
            UPDATE stageq.tasks t
               SET state = 'running', attempt = t.attempt + 1, worker_id = p_worker,
                   lease_token = p_token, lease_expires_at = v_expires
              FROM c WHERE t.id = c.id
            RETURNING t.*
        LOOP
            RETURN NEXT v_task;
            v_n := v_n + 1;
        END LOOP;
        v_got := v_got + v_n;
        -- Nothing taken: what is left at this priority is another claim's.
        EXIT WHEN v_n = 0 OR v_got >= p_max;
    END LOOP;
END $$;

-- stageq.claim_gated is stageq.claim's path when concurrency limits exist. Each
-- candidate, in claim order, is locked alone (SKIP LOCKED: another claim's is
-- passed over) and admitted when its capped process's row and each limit row
-- that applies can be locked (SKIP LOCKED again: held by another claim counts as
-- full) and their running tasks, counted in a statement whose snapshot sees
-- every claim that held the lock before, leave a slot. A candidate that is not
-- admitted loses its turn: it goes behind the current virtual time. Further
-- candidates of a full process or limit are skipped in this claim, and a lower
-- priority is served only when nothing at a higher one could be taken for a
-- limit (not for a lock).
CREATE FUNCTION stageq.claim_gated(p_max int, p_worker text, p_token bigint, p_expires timestamptz)
RETURNS SETOF stageq.tasks
LANGUAGE plpgsql
SET enable_sort = off
AS $$
DECLARE
    v_got       int := 0;
    v_top       int;
    v_prev      int;
    v_cand      record;
    v_task      stageq.tasks;
    v_fullp     bigint[] := '{}'; -- capped processes found full
    v_fullk     text[] := '{}';   -- limit keys found full
    v_fullkind  text[] := '{}';   -- kinds found full
    v_ok        boolean;
    v_busy      boolean;
    v_seen      int;
    v_running   int;
BEGIN
    LOOP
        SELECT t.process_priority INTO v_top FROM stageq.tasks t
         WHERE t.state = 'available' AND (v_prev IS NULL OR t.process_priority < v_prev)
         ORDER BY t.process_priority DESC, t.vtime, t.id LIMIT 1;
        EXIT WHEN NOT FOUND;
        v_busy := false;
        v_seen := 0;
        FOR v_cand IN
            SELECT t.id, t.process_id, t.kind, t.limit_key, p.max_parallel, p.priority, p.weight
              FROM stageq.tasks t JOIN stageq.processes p ON p.id = t.process_id
             WHERE t.state = 'available' AND t.process_priority = v_top
               AND t.process_id <> ALL (v_fullp)
               AND (t.limit_key IS NULL OR t.limit_key <> ALL (v_fullk))
               AND t.kind <> ALL (v_fullkind)
             ORDER BY t.process_priority DESC, t.vtime, t.id
             LIMIT p_max + 16
        LOOP
            v_seen := v_seen + 1;
            CONTINUE WHEN v_cand.process_id = ANY (v_fullp)
                       OR v_cand.limit_key = ANY (v_fullk) OR v_cand.kind = ANY (v_fullkind);
            PERFORM 1 FROM stageq.tasks WHERE id = v_cand.id AND state = 'available' FOR UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                v_busy := true; -- another claim's, or already taken
                CONTINUE;
            END IF;
            v_ok := true;
            IF v_cand.max_parallel IS NOT NULL THEN
                PERFORM 1 FROM stageq.processes WHERE id = v_cand.process_id FOR UPDATE SKIP LOCKED;
                IF FOUND THEN
                    SELECT count(*) INTO v_running FROM stageq.tasks
                     WHERE process_id = v_cand.process_id AND state = 'running';
                    v_ok := v_running < v_cand.max_parallel;
                ELSE
                    v_ok := false;
                END IF;
                IF NOT v_ok THEN
                    v_fullp := v_fullp || v_cand.process_id;
                END IF;
            END IF;
            IF v_ok AND NOT stageq.limit_admits(v_cand.limit_key, v_cand.kind) THEN
                v_ok := false;
                IF v_cand.limit_key IS NOT NULL AND NOT stageq.limit_admits(v_cand.limit_key, NULL) THEN
                    v_fullk := v_fullk || v_cand.limit_key;
                ELSE
                    v_fullkind := v_fullkind || v_cand.kind;
                END IF;
            END IF;
            IF v_ok THEN
                UPDATE stageq.tasks t
                   SET state = 'running', attempt = t.attempt + 1, worker_id = p_worker,
                       lease_token = p_token, lease_expires_at = p_expires
                 WHERE t.id = v_cand.id
                RETURNING t.* INTO v_task;
                RETURN NEXT v_task;
                v_got := v_got + 1;
                EXIT WHEN v_got >= p_max;
            ELSE
                UPDATE stageq.tasks
                   SET vtime = greatest(vtime, stageq.vnow(v_cand.priority) + 1000000 / v_cand.weight)
                 WHERE id = v_cand.id;
            END IF;
        END LOOP;
        EXIT WHEN v_got >= p_max OR v_busy;
        IF v_seen >= p_max + 16 THEN
            CONTINUE; -- the same priority again, past the full ones
        END IF;
        v_prev := v_top;
    END LOOP;
END $$;

-- stageq.finish_many ends many attempts in one transaction: p_ids, p_tokens,
-- p_outcomes ('succeeded', 'failed' or 'released'), p_errors and p_retry_ms are
-- parallel arrays; with 'failed', p_retry_ms > 0 schedules another attempt and
-- 0 fails the task for good. Each result is fenced by its token: one whose token
-- no longer holds its task changes nothing. Returns a row per attempt recorded,
-- and, separately, each process whose current stage this batch may have ended
-- (task_id NULL): the caller passes those to stageq.advance after committing.
--
-- Succeeded tasks are deleted without touching their process: the hot path.
-- Tasks handed back (a retry, a release) or failed for good lock their process
-- row first (in id order, as every writer does), so that a lower order
-- submitted meanwhile cannot be missed and a final failure marks its process
-- failed in the same transaction. Those are the exceptions, not the flow.
CREATE FUNCTION stageq.finish_many(p_ids bigint[], p_tokens bigint[], p_outcomes text[],
                                   p_errors text[], p_retry_ms bigint[])
RETURNS TABLE (task_id bigint, advance_process_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_ids    bigint[];
    v_pids   bigint[];
    v_orders int[];
    v_finals boolean[];
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(p_outcomes) o WHERE o NOT IN ('succeeded', 'failed', 'released')) THEN
        RAISE EXCEPTION 'stageq.finish_many: unknown outcome in %', p_outcomes USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_outcomes) o WHERE o <> 'succeeded') THEN
        PERFORM 1 FROM stageq.processes p
         WHERE p.id IN (SELECT t.process_id
                          FROM unnest(p_ids, p_outcomes) AS r(id, outcome)
                          JOIN stageq.tasks t ON t.id = r.id
                         WHERE r.outcome <> 'succeeded' AND t.state = 'running')
         ORDER BY p.id
           FOR UPDATE;
    END IF;

    WITH r AS (
        SELECT * FROM unnest(p_ids, p_tokens, p_outcomes, p_errors, p_retry_ms)
                   AS r(id, token, outcome, error, retry_ms)
    ), done AS (
        DELETE FROM stageq.tasks t USING r
         WHERE t.id = r.id AND t.lease_token = r.token AND t.state = 'running' AND r.outcome = 'succeeded'
        RETURNING t.id, t.process_id, t.execution_order, false AS final, NULL::timestamptz AS retry_at
    ), back AS (
        UPDATE stageq.tasks t
           SET state = CASE WHEN r.outcome = 'failed' AND coalesce(r.retry_ms, 0) <= 0 THEN 'failed'
                            WHEN t.execution_order IS DISTINCT FROM p.current_order OR p.paused THEN 'blocked'
                            WHEN r.outcome = 'failed' THEN 'scheduled'
                            ELSE 'available' END,
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
        RETURNING t.id, t.process_id, t.execution_order, t.state = 'failed' AS final,
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
    SELECT array_agg(e.id), array_agg(e.process_id), array_agg(e.execution_order), array_agg(e.final)
      INTO v_ids, v_pids, v_orders, v_finals
      FROM ended e;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    IF true = ANY (v_finals) THEN
        UPDATE stageq.processes p SET state = 'failed', updated_at = now()
         WHERE p.state = 'active'
           AND p.id IN (SELECT e.pid FROM unnest(v_pids, v_finals) AS e(pid, final) WHERE e.final);
    END IF;

    RETURN QUERY SELECT unnest(v_ids), NULL::bigint;
    -- A stage may have ended when none of its tasks is left waiting: the ones
    -- still there are all running (perhaps finishing in other transactions
    -- right now).
    RETURN QUERY
    SELECT DISTINCT NULL::bigint, e.pid
      FROM unnest(v_pids, v_orders) AS e(pid, ord)
      JOIN stageq.processes p ON p.id = e.pid
     WHERE (e.ord = p.current_order
            AND NOT EXISTS (SELECT 1 FROM stageq.tasks t
                             WHERE t.process_id = e.pid AND t.execution_order = p.current_order
                               AND t.state <> 'running'));
END $$;

-- stageq.finish ends one attempt, as stageq.finish_many does many. Returns
-- whether the token still held the task; the caller runs stageq.advance for the
-- task's process once its transaction committed.
CREATE FUNCTION stageq.finish(p_task_id bigint, p_token bigint, p_outcome text,
                              p_error text, p_retry_ms bigint)
RETURNS boolean
LANGUAGE sql AS $$
    SELECT count(*) FILTER (WHERE f.task_id = p_task_id) > 0
      FROM stageq.finish_many(ARRAY[p_task_id], ARRAY[p_token], ARRAY[p_outcome],
                              ARRAY[coalesce(p_error, '')], ARRAY[coalesce(p_retry_ms, 0)]) f
$$;

-- stageq.rescue returns up to p_max tasks whose lease expired to the queue, or
-- fails them when they are out of attempts, and closes their Logs rows as
-- abandoned. It then repairs up to p_max processes whose stage ended without
-- being advanced (a worker died between a completion and its stageq.advance).
CREATE FUNCTION stageq.rescue(p_max int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n int := 0;
    v_pids bigint[];
BEGIN
    FOR r IN
        SELECT e.* FROM (
            SELECT t.id, t.process_id, t.lease_token, t.worker_id
              FROM stageq.tasks t
             WHERE t.state = 'running' AND t.lease_expires_at < clock_timestamp()
             LIMIT p_max) e
         ORDER BY e.process_id
    LOOP
        -- Process rows in id order, never waiting: a process busy elsewhere is
        -- rescued by a later pass.
        PERFORM 1 FROM stageq.processes WHERE id = r.process_id FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        UPDATE stageq.tasks
           SET state = CASE WHEN attempt >= max_attempts THEN 'failed' ELSE 'blocked' END,
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
            -- Handed back blocked: open_stage makes it available again when its
            -- stage is still the open one.
            PERFORM stageq.open_stage(r.process_id);
            n := n + 1;
        END IF;
    END LOOP;

    SELECT array_agg(p.id) INTO v_pids FROM (
        SELECT p.id FROM stageq.processes p
         WHERE p.state IN ('active', 'failed')
           AND (p.current_order IS NULL
                OR NOT EXISTS (SELECT 1 FROM stageq.tasks t
                                WHERE t.process_id = p.id AND t.execution_order = p.current_order))
         LIMIT p_max) p;
    IF v_pids IS NOT NULL THEN
        PERFORM count(*) FROM stageq.advance(v_pids);
    END IF;
    RETURN n;
END $$;

-- stageq.configure changes a locked process's scheduling. p_priority, p_weight
-- and p_max_parallel are NULL to keep them; p_max_parallel 0 removes the cap. A
-- new priority reaches the tasks already waiting (the claim orders by their
-- copy of it); a new weight re-spaces the turns of the tasks already stamped,
-- from the earliest of them, so a plan's weight applies to its own tasks.
CREATE FUNCTION stageq.configure(p_process_id bigint, p_priority int, p_weight int, p_max_parallel int)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_old    record;
    v_new    record;
    v_base   bigint;
    v_stride bigint;
    v_n      bigint;
BEGIN
    SELECT priority, weight INTO v_old FROM stageq.processes WHERE id = p_process_id;
    UPDATE stageq.processes
       SET priority = coalesce(p_priority, priority),
           weight = coalesce(p_weight, weight),
           max_parallel = CASE WHEN p_max_parallel IS NULL THEN max_parallel
                               WHEN p_max_parallel = 0 THEN NULL ELSE p_max_parallel END,
           updated_at = now()
     WHERE id = p_process_id
    RETURNING priority, weight INTO v_new;
    IF v_new.priority <> v_old.priority THEN
        UPDATE stageq.tasks SET process_priority = v_new.priority
         WHERE process_id = p_process_id AND process_priority <> v_new.priority;
    END IF;
    IF v_new.weight <> v_old.weight THEN
        v_stride := 1000000 / v_new.weight;
        SELECT min(vtime), count(*) INTO v_base, v_n FROM stageq.tasks
         WHERE process_id = p_process_id AND state IN ('available', 'scheduled');
        IF v_n > 0 THEN
            WITH w AS (
                SELECT id, row_number() OVER (ORDER BY vtime, id) AS rk FROM stageq.tasks
                 WHERE process_id = p_process_id AND state IN ('available', 'scheduled')
            )
            UPDATE stageq.tasks t SET vtime = v_base + (w.rk - 1) * v_stride FROM w WHERE t.id = w.id;
            UPDATE stageq.processes SET vtail = v_base + v_n * v_stride WHERE id = p_process_id;
        END IF;
    END IF;
END $$;
