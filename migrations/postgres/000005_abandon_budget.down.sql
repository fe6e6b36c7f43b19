-- Back to version 4: stageq.rescue as version 4 and stageq.finish_many as
-- version 2 defined them.
CREATE OR REPLACE FUNCTION stageq.rescue(p_max int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n int := 0;
    v_pids bigint[];
    v_body int;
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
        SELECT a.pid INTO v_body
          FROM stageq.logs l JOIN pg_stat_activity a ON a.pid = l.session
         WHERE l.task_id = r.id AND l.lease_token = r.lease_token AND l.session IS NOT NULL
           AND a.application_name = stageq.body_tag(r.id, r.lease_token)
           AND a.state IS DISTINCT FROM 'idle'
         LIMIT 1;
        IF FOUND THEN
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
DROP FUNCTION stageq.abandon_error(text, int);
DROP FUNCTION stageq.max_abandons();
ALTER TABLE stageq.tasks DROP COLUMN abandons;
