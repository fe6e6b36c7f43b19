-- Submission: validate a JSON array of tasks like the CLI validates a plan,
-- find or create the process, insert its tasks blocked and open its lowest
-- stage. enqueue is the one-task form; configure changes a process's settings.

CREATE OR REPLACE FUNCTION stageq_routines.valid_timestamptz(p text)
 RETURNS boolean
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
BEGIN
    PERFORM p::timestamptz;
    RETURN true;
EXCEPTION WHEN others THEN
    RETURN false;
END $function$;

CREATE OR REPLACE FUNCTION stageq_routines.valid_whole(p jsonb, p_min numeric, p_max numeric)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT jsonb_typeof(p) = 'number' AND p::text::numeric = trunc(p::text::numeric)
       AND p::text::numeric BETWEEN p_min AND p_max
$function$;

CREATE OR REPLACE FUNCTION stageq_routines.validate_tasks(p_process text, p_tasks jsonb)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_bad record;
BEGIN
    IF p_process IS NULL OR p_process ~ '^\s*$' THEN
        RAISE EXCEPTION 'stageq: process: name must not be empty' USING ERRCODE = '22023';
    END IF;
    IF length(p_process) > 200 THEN
        RAISE EXCEPTION 'stageq: process: name is longer than 200 characters' USING ERRCODE = '22023';
    END IF;
    IF p_tasks IS NULL OR jsonb_typeof(p_tasks) <> 'array' OR jsonb_array_length(p_tasks) = 0 THEN
        RAISE EXCEPTION 'stageq: p_tasks must be a JSON array of at least one task object' USING ERRCODE = '22023';
    END IF;
    SELECT x.ord, p.problem INTO v_bad
      FROM jsonb_array_elements(p_tasks) WITH ORDINALITY AS x(t, ord)
      CROSS JOIN LATERAL (SELECT CASE
        WHEN jsonb_typeof(x.t) <> 'object' THEN 'must be a JSON object'
        WHEN EXISTS (SELECT 1 FROM jsonb_object_keys(x.t) k
                      WHERE k NOT IN ('execution_order', 'body', 'kind', 'max_attempts', 'priority',
                                      'atomic', 'run_at', 'delay_ms', 'limit_key'))
            THEN format('unknown field %s (known: execution_order, body, kind, max_attempts, priority, atomic, run_at, delay_ms, limit_key)',
                        (SELECT string_agg(quote_ident(k), ', ') FROM jsonb_object_keys(x.t) k
                          WHERE k NOT IN ('execution_order', 'body', 'kind', 'max_attempts', 'priority',
                                          'atomic', 'run_at', 'delay_ms', 'limit_key')))
        WHEN coalesce(jsonb_typeof(x.t -> 'execution_order'), 'null') = 'null' THEN 'execution_order is required'
        WHEN NOT stageq_routines.valid_whole(x.t -> 'execution_order', 0, 2147483647)
            THEN format('execution_order must be a whole number from 0 to 2147483647, got %s', x.t -> 'execution_order')
        WHEN jsonb_typeof(x.t -> 'body') IS DISTINCT FROM 'string' THEN 'body must be a string'
        WHEN x.t ->> 'body' ~ '^\s*$' THEN 'body must not be empty'
        WHEN coalesce(jsonb_typeof(x.t -> 'kind'), 'null') NOT IN ('null', 'string') THEN 'kind must be a string'
        WHEN x.t ->> 'kind' = '' THEN 'kind must not be empty'
        WHEN length(x.t ->> 'kind') > 200 THEN 'kind is longer than 200 characters'
        WHEN coalesce(jsonb_typeof(x.t -> 'max_attempts'), 'null') <> 'null'
             AND NOT stageq_routines.valid_whole(x.t -> 'max_attempts', 1, 2147483647)
            THEN format('max_attempts must be a whole number from 1 to 2147483647, got %s', x.t -> 'max_attempts')
        WHEN coalesce(jsonb_typeof(x.t -> 'priority'), 'null') <> 'null'
             AND NOT stageq_routines.valid_whole(x.t -> 'priority', -2147483648, 2147483647)
            THEN format('priority must be a whole number that fits in 32 bits, got %s', x.t -> 'priority')
        WHEN coalesce(jsonb_typeof(x.t -> 'atomic'), 'null') NOT IN ('null', 'boolean') THEN 'atomic must be true or false'
        WHEN coalesce(jsonb_typeof(x.t -> 'delay_ms'), 'null') <> 'null'
             AND NOT stageq_routines.valid_whole(x.t -> 'delay_ms', 0, 9223372036854775807)
            THEN format('delay_ms must be a whole number >= 0, got %s', x.t -> 'delay_ms')
        WHEN coalesce(jsonb_typeof(x.t -> 'run_at'), 'null') NOT IN ('null', 'string') THEN 'run_at must be a timestamp string'
        WHEN jsonb_typeof(x.t -> 'run_at') = 'string' AND NOT stageq_routines.valid_timestamptz(x.t ->> 'run_at')
            THEN format('run_at %s is not a timestamp', x.t -> 'run_at')
        WHEN coalesce(jsonb_typeof(x.t -> 'limit_key'), 'null') NOT IN ('null', 'string') THEN 'limit_key must be a string'
        WHEN x.t ->> 'limit_key' ~ '^\s*$' THEN 'limit_key must not be empty'
        WHEN length(x.t ->> 'limit_key') > 200 THEN 'limit_key is longer than 200 characters'
        WHEN x.t ->> 'limit_key' LIKE 'kind:%' OR x.t ->> 'limit_key' LIKE 'process:%'
            THEN format('limit_key %s: the prefixes "kind:" and "process:" are reserved for kind and process limits', x.t -> 'limit_key')
        END AS problem) p
     WHERE p.problem IS NOT NULL
     ORDER BY x.ord
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'stageq: task %: %', v_bad.ord, v_bad.problem USING ERRCODE = '22023';
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION stageq_routines.configure(p_process_id bigint, p_priority integer, p_weight integer, p_max_parallel integer)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
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
        -- Waiting and running tasks alike (a running one handed back takes its
        -- turn at the new priority), each through its own index.
        UPDATE stageq.tasks SET process_priority = v_new.priority
         WHERE process_id = p_process_id AND state <> 'running' AND process_priority <> v_new.priority;
        UPDATE stageq.tasks SET process_priority = v_new.priority
         WHERE process_id = p_process_id AND state = 'running' AND process_priority <> v_new.priority;
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
END $function$;

CREATE OR REPLACE FUNCTION stageq_routines.submit(p_process text, p_tasks jsonb)
 RETURNS TABLE(process_id bigint, task_id bigint)
 LANGUAGE plpgsql
 -- As advance: here and in open_stage and the fairness stamps under it, a
 -- process is read by its name or key, never by a scan of Processes, whatever
 -- its statistics say (taken before a burst of new processes, they made each
 -- submission of one read them all).
 SET enable_seqscan TO 'off'
 SET jit TO 'off' -- see claim (40_claim.sql)
AS $function$
DECLARE
    v_p      record;
    v_pid    bigint;
    v_min    int;
    v_open   int;
    v_base   bigint;
    v_stride bigint;
    v_n      bigint;
BEGIN
    PERFORM stageq_routines.validate_tasks(p_process, p_tasks);

    SELECT p.id INTO v_pid FROM stageq.processes p WHERE p.name = p_process FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO stageq.processes (name) VALUES (p_process) ON CONFLICT (name) DO NOTHING;
        SELECT p.id INTO v_pid FROM stageq.processes p WHERE p.name = p_process FOR UPDATE;
    END IF;
    SELECT p.current_order, p.paused, p.weight, p.priority INTO v_p FROM stageq.processes p WHERE p.id = v_pid;
    SELECT min(x.execution_order) INTO v_min FROM jsonb_to_recordset(p_tasks) AS x(execution_order int);
    v_open := CASE WHEN v_p.paused THEN NULL ELSE least(coalesce(v_p.current_order, v_min), v_min) END;
    v_stride := 1000000 / v_p.weight;
    v_base := stageq_routines.stamp_base(v_pid);

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
        PERFORM stageq_routines.stamp_done(v_pid, v_base + v_n * v_stride);
    END IF;
    PERFORM stageq_routines.open_stage(v_pid);
    PERFORM pg_notify('stageq_tasks', '');
END $function$;

CREATE OR REPLACE FUNCTION stageq_routines.enqueue(body text, execution_order integer DEFAULT 0, process text DEFAULT 'default'::text, max_attempts integer DEFAULT 3, priority integer DEFAULT 0, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, atomic boolean DEFAULT false, kind text DEFAULT 'sql'::text, limit_key text DEFAULT NULL::text)
 RETURNS bigint
 LANGUAGE sql
AS $function$
    SELECT s.task_id FROM stageq_routines.submit(
        enqueue.process,
        jsonb_build_array(jsonb_build_object(
            'execution_order', enqueue.execution_order, 'body', enqueue.body, 'kind', enqueue.kind,
            'max_attempts', enqueue.max_attempts, 'priority', enqueue.priority,
            'atomic', enqueue.atomic, 'run_at', enqueue.run_at, 'limit_key', enqueue.limit_key))) AS s
$function$;

