-- Back to version 3: stageq.rescue as migration 000002 defined it.
CREATE OR REPLACE FUNCTION stageq.rescue(p_max int) RETURNS int
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
DROP FUNCTION stageq.body_session(bigint, bigint);
DROP FUNCTION stageq.body_tag(bigint, bigint);
ALTER TABLE stageq.logs DROP COLUMN session;
