-- The functions users' own SQL calls, in schema stageq with the signatures they
-- always had. Each forwards to the newest installed routines: installing a new
-- version re-points them, in the same transaction, so a caller never sees a gap.
-- They are SQL functions of one SELECT, so a forward costs one more call.
CREATE OR REPLACE FUNCTION stageq.submit(p_process text, p_tasks jsonb)
 RETURNS TABLE(process_id bigint, task_id bigint)
 LANGUAGE sql
AS $function$
    SELECT s.process_id, s.task_id FROM stageq_routines.submit($1, $2) s
$function$;

CREATE OR REPLACE FUNCTION stageq.enqueue(body text, execution_order integer DEFAULT 0, process text DEFAULT 'default'::text,
    max_attempts integer DEFAULT 3, priority integer DEFAULT 0, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone,
    atomic boolean DEFAULT false, kind text DEFAULT 'sql'::text, limit_key text DEFAULT NULL::text)
 RETURNS bigint
 LANGUAGE sql
AS $function$
    SELECT stageq_routines.enqueue($1, $2, $3, $4, $5, $6, $7, $8, $9)
$function$;
