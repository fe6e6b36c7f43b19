-- Crash rescue: an expired lease is taken back. A body still running in the
-- database for the dead attempt (found by its marked query text or session
-- name, body_backend) is cancelled first, and the task stays running until it ends.

CREATE OR REPLACE FUNCTION stageq_routines.body_tag(p_task_id bigint, p_token bigint)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT 'stageq task ' || p_task_id || ' lease ' || p_token
$function$;

CREATE OR REPLACE FUNCTION stageq_routines.body_backend(p_task_id bigint, p_token bigint)
 RETURNS integer
 LANGUAGE sql
 STABLE
AS $function$
    SELECT a.pid FROM pg_stat_activity a
     WHERE (starts_with(a.query, '/* ' || stageq_routines.body_tag(p_task_id, p_token) || ' */')
            OR a.application_name = stageq_routines.body_tag(p_task_id, p_token))
       AND a.state IS DISTINCT FROM 'idle'
       AND a.pid <> pg_backend_pid()
     LIMIT 1
$function$;

CREATE OR REPLACE FUNCTION stageq_routines.body_session(p_task_id bigint, p_token bigint)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_state text;
    v_token bigint;
BEGIN
    PERFORM set_config('application_name', stageq_routines.body_tag(p_task_id, p_token), false);
    IF current_setting('server_version_num')::int >= 140000 THEN
        PERFORM set_config('client_connection_check_interval', '1000', false);
    END IF;
    -- A rescue that freed the attempt before its body started: do not start it.
    SELECT state, lease_token INTO v_state, v_token FROM stageq.tasks WHERE id = p_task_id;
    RETURN FOUND AND v_state = 'running' AND v_token = p_token;
END $function$;

CREATE OR REPLACE FUNCTION stageq_routines.rescue(p_max integer)
 RETURNS integer
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off' -- as finish_many: its Logs update seeks logs_task
 SET jit TO 'off' -- see claim (40_claim.sql)
AS $function$
DECLARE
    r record;
    n int := 0;
    v_pids bigint[];
    v_body int;
    v_err text;
    v_gone boolean; -- the task's process row is gone
    v_start bigint;
    v_last bigint;
    v_after text := current_setting('stageq.repair_after', true);
BEGIN
    FOR r IN
        SELECT e.* FROM (
            SELECT t.id, t.process_id, t.lease_token, t.worker_id
              FROM stageq.tasks t
             WHERE t.state = 'running' AND t.lease_expires_at < clock_timestamp()
             LIMIT p_max) e
         ORDER BY e.process_id
    LOOP
        -- The attempt's body may still run in its session: end it, and free
        -- the task only once a later pass (a new snapshot of pg_stat_activity)
        -- finds the session gone. A limit counts bodies running.
        v_body := stageq_routines.body_backend(r.id, r.lease_token);
        IF v_body IS NOT NULL THEN
            BEGIN
                PERFORM pg_terminate_backend(v_body);
            EXCEPTION WHEN insufficient_privilege THEN
                RAISE WARNING 'stageq: task % keeps its slot while its abandoned body (backend %) runs: % (grant pg_signal_backend to the workers'' role)',
                    r.id, v_body, SQLERRM;
            END;
            CONTINUE;
        END IF;
        -- Process rows in id order, never waiting: a process busy elsewhere is
        -- rescued by a later pass.
        PERFORM 1 FROM stageq.processes WHERE id = r.process_id FOR UPDATE SKIP LOCKED;
        v_gone := NOT FOUND;
        v_err := 'lease expired: worker ' || r.worker_id || ' stopped extending it';
        IF v_gone THEN
            CONTINUE WHEN EXISTS (SELECT 1 FROM stageq.processes WHERE id = r.process_id);
            -- Locked elsewhere, the row is still seen here (a plain read):
            -- only a process that is gone goes on. Gone means deleted by hand,
            -- since stageq deletes only a process with no task left, and no
            -- foreign key refuses it (see migration 14). Its task can never
            -- run or advance; skipped, it would come back in every pass, and
            -- enough of them would fill each pass's p_max and keep every other
            -- expired lease, and the slots they hold under a limit, from ever
            -- being freed. It is removed and its attempt closed.
            DELETE FROM stageq.tasks
             -- Held as finish_many tests it (50_finish.sql says why).
             WHERE id = r.id AND CASE WHEN state = 'running' THEN lease_token END = r.lease_token
               AND lease_expires_at < clock_timestamp()
            RETURNING coalesce(v_err, 'lease expired') || '; its process (id ' || r.process_id
                      || ') no longer exists: task removed' INTO v_err;
        ELSE
            UPDATE stageq.tasks
               SET state = CASE WHEN abandons + 1 >= stageq_routines.max_abandons() THEN 'failed' ELSE 'blocked' END,
                   abandons = abandons + 1,
                   run_at = now(),
                   last_error = stageq_routines.abandon_error(v_err, abandons + 1),
                   worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
             WHERE id = r.id AND CASE WHEN state = 'running' THEN lease_token END = r.lease_token
               AND lease_expires_at < clock_timestamp()
            RETURNING last_error INTO v_err;
        END IF;
        IF FOUND THEN
            UPDATE stageq.logs
               SET ended_at = clock_timestamp(),
                   duration_ms = (extract(epoch FROM clock_timestamp() - started_at) * 1000)::bigint,
                   outcome = 'abandoned',
                   error = v_err
             WHERE task_id = r.id AND lease_token = r.lease_token;
            -- Handed back blocked: open_stage makes it available again when its
            -- stage is still the open one.
            IF NOT v_gone THEN
                PERFORM stageq_routines.open_stage(r.process_id);
            END IF;
            n := n + 1;
        END IF;
    END LOOP;

    -- The repair: an open process whose stage has no task left, which no
    -- advance followed (its last finish committed and its worker died before
    -- the advance). A pass examines up to 1,000 open processes in key order,
    -- wrapping around: all of them when there are no more, and otherwise the
    -- next 1,000 after the last one this session's previous pass examined (a
    -- random one, for the session's first), so each pass costs the same however
    -- many processes are open, and a session's passes go round all of them.
    -- Examining every open process took 3.2 s a pass with 50,000 of them
    -- (seen), in every worker's rescue every heartbeat; with a few times as
    -- many the pass would outlast its timeout and roll back the leases it had
    -- rescued. The place is kept in the session (a setting of its own, which
    -- any role may set), not in a table: no row for every worker to update,
    -- no grant to ask for. A start drawn at random each pass instead favours
    -- the processes just after a gap in the keys: with a few old processes
    -- open and 50,000 among the newest of a million made, each of those but
    -- the first thousand would be examined about once in 1,000 passes.
    -- Anything but a key in the setting (a role's or database's SET of the
    -- same name, say) counts as none: cast as it was, it failed every pass
    -- (routines version 7).
    v_start := CASE WHEN v_after ~ '^[0-9]{1,18}$' THEN v_after::bigint + 1 END;
    IF v_start IS NULL THEN
        v_start := floor(random() * ((SELECT max(p.id) FROM stageq.processes p) + 1))::bigint;
    END IF;
    SELECT array_agg(s.id) FILTER (WHERE s.ended),
           (array_agg(s.id ORDER BY s.wrapped DESC, s.id DESC))[1]
      INTO v_pids, v_last
      FROM (
        SELECT x.id, x.wrapped,
               -- NOT stage_left (30_stages.sql), written out as finish_many
               -- writes out stage_waiting: called once per process, the
               -- function cost about 75 µs a call here (1,000 processes: 75 to
               -- 110 ms, against 2 to 10 ms written out, in psql). Keep the
               -- two alike.
               x.current_order IS NULL
               OR ((SELECT 1 FROM stageq.tasks t
                     WHERE t.process_id = x.id
                       AND t.execution_order >= x.current_order AND t.execution_order <= x.current_order
                       AND t.state <> 'running'
                     ORDER BY t.process_id DESC, t.execution_order DESC LIMIT 1) IS NULL
                   AND NOT EXISTS (SELECT 1 FROM stageq.tasks t
                                    WHERE t.process_id = x.id AND t.state = 'running'
                                      AND t.execution_order = x.current_order)) AS ended
          FROM (
            SELECT y.* FROM (
                (SELECT p.id, p.current_order, false AS wrapped FROM stageq.processes p
                  WHERE p.state IN ('active', 'failed') AND p.id >= v_start
                  ORDER BY p.id LIMIT 1000)
                UNION ALL
                (SELECT p.id, p.current_order, true AS wrapped FROM stageq.processes p
                  WHERE p.state IN ('active', 'failed') AND p.id < v_start
                  ORDER BY p.id LIMIT 1000)
            ) y LIMIT 1000) x
      ) s;
    IF v_last IS NOT NULL THEN
        PERFORM set_config('stageq.repair_after', v_last::text, false);
    END IF;
    IF v_pids IS NOT NULL THEN
        PERFORM count(*) FROM stageq_routines.advance(v_pids[1:p_max]);
    END IF;
    RETURN n;
END $function$;

