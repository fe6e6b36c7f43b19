-- Completion: fenced by the claim's token, one task (finish) or a batch across
-- processes (finish_many); a failure is retried with backoff or ends the task.

CREATE OR REPLACE FUNCTION stageq_routines.abandon_error(p_error text, p_n integer)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT CASE WHEN p_n >= stageq_routines.max_abandons()
                THEN coalesce(nullif(p_error, ''), 'abandoned') || '; abandoned ' || p_n
                     || ' times (its worker died or lost its database connection each time): failed for good'
                ELSE coalesce(nullif(p_error, ''), 'abandoned') || ' (abandoned ' || p_n || ' of '
                     || stageq_routines.max_abandons() || ' times; not counted against max_attempts)' END
$function$;

CREATE OR REPLACE FUNCTION stageq_routines.max_abandons()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE
AS $function$ SELECT 10 $function$;

CREATE OR REPLACE FUNCTION stageq_routines.finish(p_task_id bigint, p_token bigint, p_outcome text, p_error text, p_retry_ms bigint)
 RETURNS boolean
 LANGUAGE sql
AS $function$
    SELECT count(*) FILTER (WHERE f.task_id = p_task_id) > 0
      FROM stageq_routines.finish_many(ARRAY[p_task_id], ARRAY[p_token], ARRAY[p_outcome],
                              ARRAY[coalesce(p_error, '')], ARRAY[coalesce(p_retry_ms, 0)]) f
$function$;

-- A task still held is tested as CASE WHEN state = 'running' THEN lease_token
-- END = the token, here and in the rescue and the heartbeat's extension. Written
-- as state = 'running' AND lease_token = …, the test let the planner read a
-- batch through tasks_running instead of probing each task's key: statistics
-- taken while few tasks ran (the usual case: they are a small share of the
-- table) make that index look empty, and the join then walked every running
-- task in the cluster once per task of the batch (0.9 million comparisons for
-- 300 tasks beside 3,000 running). The CASE form proves nothing about state, so
-- only the key is left to seek; and it is a condition on the row changed, so
-- a row updated meanwhile (the heartbeat extending its lease) is tested again
-- in its newest version.
CREATE OR REPLACE FUNCTION stageq_routines.finish_many(p_ids bigint[], p_tokens bigint[], p_outcomes text[], p_errors text[], p_retry_ms bigint[])
 RETURNS TABLE(task_id bigint, advance_process_id bigint)
 LANGUAGE plpgsql
 -- Planned without sequential scans: this function's plans are cached per
 -- connection, and planned while Logs was small (a young database, or one
 -- analyzed then) they read all of Logs on every call until autovacuum
 -- analyzes it again. Every statement here has an index to seek.
 SET enable_seqscan TO 'off'
 SET jit TO 'off' -- see claim (40_claim.sql)
AS $function$
DECLARE
    v_ids    bigint[];
    v_pids   bigint[];
    v_orders int[];
    v_finals boolean[];
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(p_outcomes) o WHERE o NOT IN ('succeeded', 'failed', 'released', 'abandoned')) THEN
        RAISE EXCEPTION 'stageq_routines.finish_many: unknown outcome in %', p_outcomes USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_outcomes) o WHERE o <> 'succeeded') THEN
        PERFORM 1 FROM stageq.processes p
         WHERE p.id IN (SELECT t.process_id
                          FROM unnest(p_ids, p_tokens, p_outcomes) AS r(id, token, outcome)
                          JOIN stageq.tasks t ON t.id = r.id
                         WHERE r.outcome <> 'succeeded'
                           AND CASE WHEN t.state = 'running' THEN t.lease_token END = r.token)
         ORDER BY p.id
           FOR UPDATE;
    END IF;

    WITH r AS (
        SELECT * FROM unnest(p_ids, p_tokens, p_outcomes, p_errors, p_retry_ms)
                   AS r(id, token, outcome, error, retry_ms)
    ), done AS (
        -- Driven by the batch's arrays, a primary-key probe per task; joined to
        -- the materialized r instead, the planner probed r once per running task.
        DELETE FROM stageq.tasks t
         USING unnest(p_ids, p_tokens, p_outcomes) AS d(id, token, outcome)
         WHERE t.id = d.id AND CASE WHEN t.state = 'running' THEN t.lease_token END = d.token
           AND d.outcome = 'succeeded'
        RETURNING t.id, t.process_id, t.execution_order, false AS final, NULL::timestamptz AS retry_at,
                  NULL::text AS err
    ), back AS (
        UPDATE stageq.tasks t
           SET state = CASE WHEN r.outcome = 'failed' AND coalesce(r.retry_ms, 0) <= 0 THEN 'failed'
                            WHEN r.outcome = 'abandoned' AND t.abandons + 1 >= stageq_routines.max_abandons() THEN 'failed'
                            WHEN t.execution_order IS DISTINCT FROM p.current_order OR p.paused THEN 'blocked'
                            WHEN r.outcome = 'failed' THEN 'scheduled'
                            ELSE 'available' END,
               attempt = CASE WHEN r.outcome = 'released' THEN t.attempt - 1 ELSE t.attempt END,
               abandons = CASE WHEN r.outcome = 'abandoned' THEN t.abandons + 1 ELSE t.abandons END,
               run_at = CASE WHEN r.outcome IN ('released', 'abandoned') THEN now()
                             WHEN r.outcome = 'failed' AND r.retry_ms > 0
                             THEN clock_timestamp() + r.retry_ms * interval '1 millisecond'
                             ELSE t.run_at END,
               last_error = CASE WHEN r.outcome = 'failed' THEN nullif(r.error, '')
                                 WHEN r.outcome = 'abandoned' THEN stageq_routines.abandon_error(r.error, t.abandons + 1)
                                 ELSE t.last_error END,
               worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
          FROM unnest(p_ids, p_tokens, p_outcomes, p_errors, p_retry_ms) AS r(id, token, outcome, error, retry_ms),
               stageq.processes p
         WHERE t.id = r.id AND CASE WHEN t.state = 'running' THEN t.lease_token END = r.token
           AND r.outcome <> 'succeeded' AND p.id = t.process_id
        RETURNING t.id, t.process_id, t.execution_order, t.state = 'failed' AS final,
                  CASE WHEN r.outcome = 'failed' AND r.retry_ms > 0 THEN t.run_at END AS retry_at,
                  CASE WHEN r.outcome = 'abandoned' THEN t.last_error END AS err
    ), ended AS (
        SELECT * FROM done UNION ALL SELECT * FROM back
    ), logged AS (
        UPDATE stageq.logs l
           SET ended_at = clock_timestamp(),
               duration_ms = (extract(epoch FROM clock_timestamp() - l.started_at) * 1000)::bigint,
               outcome = r.outcome, error = coalesce(e.err, nullif(r.error, '')), retry_at = e.retry_at
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
    -- One row per (process, stage) of the batch, not per task: the check below
    -- is a seek in tasks_waiting, which leaves running tasks out, from its
    -- newest entry back (stage_waiting says why).
    SELECT array_agg(d.pid), array_agg(d.ord) INTO v_pids, v_orders
      FROM (SELECT DISTINCT u.pid, u.ord FROM unnest(v_pids, v_orders) AS u(pid, ord)) d;
    -- The open stage is read per pair, a key probe each. Written as a join, the
    -- planner took every process first (the array's size unknown to it, the
    -- processes table few rows when last analyzed) and tested each against
    -- every pair: 101 processes × 52 pairs, 0.65 ms of a 3 ms finish, seen in a
    -- drain over 100 processes.
    --
    -- The second test is stage_waiting (30_stages.sql), written out: that
    -- function has a subquery, so PostgreSQL cannot inline it, and calling it
    -- cost about 5 µs more per pair than this (50 pairs: 0.65 ms against
    -- 0.37 ms, in psql), on every finish. Keep the two alike.
    RETURN QUERY
    SELECT NULL::bigint, e.pid
      FROM unnest(v_pids, v_orders) AS e(pid, ord)
     WHERE e.ord = (SELECT p.current_order FROM stageq.processes p WHERE p.id = e.pid)
       AND (SELECT 1 FROM stageq.tasks t
             WHERE t.process_id = e.pid
               AND t.execution_order >= e.ord AND t.execution_order <= e.ord
               AND t.state <> 'running'
             ORDER BY t.process_id DESC, t.execution_order DESC LIMIT 1) IS NULL;
END $function$;

