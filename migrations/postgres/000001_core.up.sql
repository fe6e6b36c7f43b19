-- stageq core schema for PostgreSQL: Processes, Tasks, Logs, Workers, and the
-- routines that keep the stage barrier (stageq.submit, stageq.finish, stageq.rescue).
-- The queue's statements call these routines so the barrier logic lives in one place,
-- and SQL users enqueue with SELECT stageq.enqueue(...) under the same validation.

CREATE SCHEMA IF NOT EXISTS stageq;

CREATE TABLE stageq.processes (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          text        NOT NULL UNIQUE CHECK (name <> '' AND length(name) <= 200),
    state         text        NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'succeeded', 'failed')),
    -- The lowest ExecutionOrder that still has tasks; NULL when the process has none.
    -- Only tasks of this order are 'available'; higher ones wait as 'blocked'.
    current_order int,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz
);

INSERT INTO stageq.processes (name) VALUES ('default');

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
    worker_id        text,
    lease_token      bigint,
    lease_expires_at timestamptz,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now()
);

-- The claim: a seek into available tasks only; blocked tasks are not in this index.
CREATE INDEX tasks_claim ON stageq.tasks (priority DESC, run_at, id) WHERE state = 'available';
-- The barrier: the lowest order left in a process, and the tasks of one stage.
CREATE INDEX tasks_stage ON stageq.tasks (process_id, execution_order);
-- Rescue of expired leases and lease extension by a worker.
CREATE INDEX tasks_lease ON stageq.tasks (lease_expires_at) WHERE state = 'running';
CREATE INDEX tasks_worker ON stageq.tasks (worker_id) WHERE state = 'running';

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
    retry_at        timestamptz
);

CREATE INDEX logs_task ON stageq.logs (task_id, lease_token);
CREATE INDEX logs_process ON stageq.logs (process_id, started_at);
CREATE INDEX logs_started ON stageq.logs (started_at);

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

-- stageq.open_stage re-derives which tasks of a locked process may run: the tasks
-- of its lowest order become 'available', higher ones 'blocked'. It is called with
-- the process row locked, by submit (a lower order may arrive) and by finish (the
-- last task of a stage may have left). Cost: seeks on tasks_stage.
CREATE FUNCTION stageq.open_stage(p_process_id bigint) RETURNS void
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
           SET current_order = NULL, state = 'succeeded', updated_at = now(), finished_at = now()
         WHERE id = p_process_id;
        RETURN;
    END IF;

    IF v_old IS NOT NULL AND v_new < v_old THEN
        -- A lower order arrived: tasks of the old stage that have not started wait again.
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
END $$;

-- stageq.submit inserts a batch of tasks into one process in the caller's
-- transaction. p_tasks is a JSON array of objects:
--   {"execution_order": int, "body": text, "kind": text, "max_attempts": int,
--    "priority": int, "atomic": bool, "run_at": timestamptz, "delay_ms": bigint}
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
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'stageq: task % is invalid: execution_order must be a whole number >= 0, body must not be empty, max_attempts must be >= 1 (got %)',
            v_bad.ord, v_bad.t USING ERRCODE = '22023';
    END IF;

    -- The process row lock serialises every change of a process's stage.
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

    -- Tasks of the stage that is open after this submission start available, the
    -- rest blocked; open_stage then blocks again any started stage above a new lower order.
    RETURN QUERY
    WITH ins AS (
        INSERT INTO stageq.tasks (process_id, execution_order, kind, body, state, priority,
                                  max_attempts, atomic, run_at)
        SELECT v_pid, x.execution_order, coalesce(x.kind, 'sql'), x.body,
               CASE WHEN x.execution_order = v_open THEN 'available' ELSE 'blocked' END,
               coalesce(x.priority, 0), coalesce(x.max_attempts, 3), coalesce(x.atomic, false),
               coalesce(x.run_at, now() + coalesce(x.delay_ms, 0) * interval '1 millisecond')
          FROM jsonb_to_recordset(p_tasks)
               AS x(execution_order int, kind text, body text, priority int, max_attempts int,
                    atomic boolean, run_at timestamptz, delay_ms bigint)
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
    kind            text        DEFAULT 'sql'
) RETURNS bigint
LANGUAGE sql AS $$
    SELECT s.task_id FROM stageq.submit(
        enqueue.process,
        jsonb_build_array(jsonb_build_object(
            'execution_order', enqueue.execution_order, 'body', enqueue.body, 'kind', enqueue.kind,
            'max_attempts', enqueue.max_attempts, 'priority', enqueue.priority,
            'atomic', enqueue.atomic, 'run_at', enqueue.run_at))) AS s
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
BEGIN
    SELECT t.process_id INTO v_pid FROM stageq.tasks t
     WHERE t.id = p_task_id AND t.lease_token = p_token AND t.state = 'running';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- Lock order everywhere: process row, then task rows.
    PERFORM 1 FROM stageq.processes WHERE id = v_pid FOR UPDATE;

    IF p_outcome = 'succeeded' THEN
        DELETE FROM stageq.tasks WHERE id = p_task_id AND lease_token = p_token AND state = 'running';
    ELSIF p_outcome = 'released' THEN
        UPDATE stageq.tasks
           SET state = 'available', attempt = attempt - 1, run_at = now(),
               worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
         WHERE id = p_task_id AND lease_token = p_token AND state = 'running';
    ELSIF p_outcome = 'failed' AND p_retry_ms IS NOT NULL AND p_retry_ms > 0 THEN
        v_retry_at := clock_timestamp() + p_retry_ms * interval '1 millisecond';
        UPDATE stageq.tasks
           SET state = 'available', run_at = v_retry_at, last_error = p_error,
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

-- stageq.rescue returns up to p_max tasks whose lease expired to the queue, or
-- fails them when they are out of attempts, and closes their Logs rows as abandoned.
CREATE FUNCTION stageq.rescue(p_max int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n int := 0;
BEGIN
    FOR r IN
        SELECT t.id, t.process_id, t.lease_token, t.worker_id
          FROM stageq.tasks t
         WHERE t.state = 'running' AND t.lease_expires_at < clock_timestamp()
         ORDER BY t.lease_expires_at
         LIMIT p_max
    LOOP
        PERFORM 1 FROM stageq.processes WHERE id = r.process_id FOR UPDATE;
        UPDATE stageq.tasks
           SET state = CASE WHEN attempt >= max_attempts THEN 'failed' ELSE 'available' END,
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
