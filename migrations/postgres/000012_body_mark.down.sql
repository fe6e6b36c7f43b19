-- Back to version 11: a body is found by its session's name alone.
CREATE OR REPLACE FUNCTION stageq.body_backend(p_task_id bigint, p_token bigint) RETURNS int
LANGUAGE sql STABLE AS $$
    SELECT a.pid FROM pg_stat_activity a
     WHERE a.application_name = stageq.body_tag(p_task_id, p_token)
       AND a.state IS DISTINCT FROM 'idle'
       AND a.pid <> pg_backend_pid()
     LIMIT 1
$$;
