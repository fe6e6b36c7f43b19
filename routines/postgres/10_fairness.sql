-- Fairness between processes: a virtual clock per priority. A process's tasks
-- are stamped with virtual times spaced by 1/weight, so the claim's order by
-- virtual time serves processes in proportion to their weights.

CREATE OR REPLACE FUNCTION stageq_routines.vnow(p_priority integer)
 RETURNS bigint
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(
        (SELECT t.vtime FROM stageq.tasks t
          WHERE t.state = 'available' AND t.process_priority = p_priority
          ORDER BY t.process_priority DESC, t.vtime, t.id LIMIT 1),
        (SELECT last_value FROM stageq.vclock))
$function$;

CREATE OR REPLACE FUNCTION stageq_routines.stamp_base(p_process_id bigint)
 RETURNS bigint
 LANGUAGE sql
 STABLE
AS $function$
    SELECT greatest(stageq_routines.vnow(p.priority), p.vtail) FROM stageq.processes p WHERE p.id = p_process_id
$function$;

CREATE OR REPLACE FUNCTION stageq_routines.stamp_done(p_process_id bigint, p_vtail bigint)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    UPDATE stageq.processes SET vtail = greatest(vtail, p_vtail) WHERE id = p_process_id;
    IF p_vtail > (SELECT last_value FROM stageq.vclock) THEN
        PERFORM setval('stageq.vclock', p_vtail);
    END IF;
END $function$;

