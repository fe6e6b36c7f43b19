-- Undo 000003: back to 000001's routines, indexes and columns.

DROP FUNCTION IF EXISTS stageq.claim(int, text, bigint, bigint);
DROP FUNCTION IF EXISTS stageq.limit_admits(text, text);

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

DROP FUNCTION IF EXISTS stageq.refresh_process(bigint);

DROP INDEX IF EXISTS stageq.processes_vtime;
DROP INDEX IF EXISTS stageq.processes_queue;
DROP INDEX IF EXISTS stageq.tasks_running_kind;
DROP INDEX IF EXISTS stageq.tasks_running_limit;
DROP INDEX IF EXISTS stageq.tasks_running_process;
DROP INDEX IF EXISTS stageq.tasks_ready;
DROP INDEX IF EXISTS stageq.tasks_claim_process;
CREATE INDEX tasks_claim ON stageq.tasks (priority DESC, run_at, id) WHERE state = 'available';

DROP TABLE IF EXISTS stageq.limits;
ALTER TABLE stageq.tasks DROP COLUMN IF EXISTS limit_key;
ALTER TABLE stageq.processes
    DROP COLUMN IF EXISTS ready_at,
    DROP COLUMN IF EXISTS runnable,
    DROP COLUMN IF EXISTS pass,
    DROP COLUMN IF EXISTS paused,
    DROP COLUMN IF EXISTS max_parallel,
    DROP COLUMN IF EXISTS weight,
    DROP COLUMN IF EXISTS priority;
