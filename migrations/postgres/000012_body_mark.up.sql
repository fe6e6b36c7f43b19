-- Version 12: a body is found by its text, not by its session's name.
--
-- Since version 4 the worker named each body's session after the attempt
-- (set_config('application_name', ...) in stageq.body_session) before the body
-- ran. Renaming a session costs the server more than the `SELECT 1` body it
-- precedes (a GUC change, a ParameterStatus message, an activity report). The
-- worker now starts the body's text with a comment holding the same tag,
-- `/* stageq task <id> lease <token> */`, which pg_stat_activity.query shows
-- while the body runs, and checks the attempt with a plain read. The tag is
-- unique to the attempt and the comment's closing `*/` keeps one tag from
-- being a prefix of another. A session named the old way (a body started by a
-- worker of version 11) is found as before.
--
-- stageq.body_session stays for workers of version 11; this version's workers
-- do not call it.
CREATE OR REPLACE FUNCTION stageq.body_backend(p_task_id bigint, p_token bigint) RETURNS int
LANGUAGE sql STABLE AS $$
    SELECT a.pid FROM pg_stat_activity a
     WHERE (starts_with(a.query, '/* ' || stageq.body_tag(p_task_id, p_token) || ' */')
            OR a.application_name = stageq.body_tag(p_task_id, p_token))
       AND a.state IS DISTINCT FROM 'idle'
       AND a.pid <> pg_backend_pid()
     LIMIT 1
$$;
