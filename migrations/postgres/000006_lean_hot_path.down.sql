-- Back to version 5: its finish_many, version 2's claim, with Logs' fillfactor 80.
ALTER TABLE stageq.logs SET (fillfactor = 80);

CREATE OR REPLACE FUNCTION stageq.finish_many(p_ids bigint[], p_tokens bigint[], p_outcomes text[],
                                   p_errors text[], p_retry_ms bigint[])
RETURNS TABLE (task_id bigint, advance_process_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_ids    bigint[];
    v_pids   bigint[];
    v_orders int[];
    v_finals boolean[];
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(p_outcomes) o WHERE o NOT IN ('succeeded', 'failed', 'released', 'abandoned')) THEN
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
        RETURNING t.id, t.process_id, t.execution_order, false AS final, NULL::timestamptz AS retry_at,
                  NULL::text AS err
    ), back AS (
        UPDATE stageq.tasks t
           SET state = CASE WHEN r.outcome = 'failed' AND coalesce(r.retry_ms, 0) <= 0 THEN 'failed'
                            WHEN r.outcome = 'abandoned' AND t.abandons + 1 >= stageq.max_abandons() THEN 'failed'
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
                                 WHEN r.outcome = 'abandoned' THEN stageq.abandon_error(r.error, t.abandons + 1)
                                 ELSE t.last_error END,
               worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
          FROM r, stageq.processes p
         WHERE t.id = r.id AND t.lease_token = r.token AND t.state = 'running'
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
    RETURN QUERY
    SELECT DISTINCT NULL::bigint, e.pid
      FROM unnest(v_pids, v_orders) AS e(pid, ord)
      JOIN stageq.processes p ON p.id = e.pid
     WHERE (e.ord = p.current_order
            AND NOT EXISTS (SELECT 1 FROM stageq.tasks t
                             WHERE t.process_id = e.pid AND t.execution_order = p.current_order
                               AND t.state <> 'running'));
END $$;

CREATE OR REPLACE FUNCTION stageq.claim(p_max int, p_worker text, p_token bigint, p_lease_ms bigint)
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
