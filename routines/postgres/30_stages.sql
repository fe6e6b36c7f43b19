-- The stage barrier: open_stage makes the lowest unfinished execution_order of a
-- process available (or ends the process when none is left); advance runs it
-- for processes whose open stage may have emptied after a finish committed.

-- How a process that has no task left ends: 'cancelled' when its newest Logs
-- row is an operator's cancel or discard, written after its last attempt
-- started (a cancel that emptied it just now, or one that left attempts
-- running, the last of which has just ended), 'succeeded' otherwise. New
-- tasks make it active again, and their attempts are newer than the cancel.
-- A seek on logs_process, read backwards.
CREATE OR REPLACE FUNCTION stageq_routines.end_state(p_process_id bigint)
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$
    SELECT CASE WHEN (SELECT l.outcome FROM stageq.logs l
                       WHERE l.process_id = p_process_id
                       ORDER BY l.started_at DESC, l.id DESC LIMIT 1) IN ('cancelled', 'discarded')
                THEN 'cancelled' ELSE 'succeeded' END
$function$;

CREATE OR REPLACE FUNCTION stageq_routines.open_stage(p_process_id bigint)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_p      record;
    v_new    int;
    v_failed boolean;
    v_base   bigint;
    v_stride bigint;
    v_n      bigint;
BEGIN
    SELECT current_order, paused, weight, priority INTO v_p FROM stageq.processes WHERE id = p_process_id;
    -- The lowest order left: of the tasks waiting (tasks_waiting) and of those
    -- running (tasks_running), which that index leaves out; a seek in each.
    SELECT least((SELECT t.execution_order FROM stageq.tasks t
                   WHERE t.process_id = p_process_id AND t.state <> 'running'
                   ORDER BY t.execution_order LIMIT 1),
                 (SELECT t.execution_order FROM stageq.tasks t
                   WHERE t.process_id = p_process_id AND t.state = 'running'
                   ORDER BY t.execution_order LIMIT 1))
      INTO v_new;

    IF v_new IS NULL THEN
        UPDATE stageq.processes
           SET current_order = NULL, state = stageq_routines.end_state(p_process_id), updated_at = now(), finished_at = now()
         WHERE id = p_process_id AND state IN ('active', 'failed');
        RETURN;
    END IF;

    IF v_p.paused THEN
        UPDATE stageq.tasks SET state = 'blocked'
         WHERE process_id = p_process_id AND state IN ('available', 'scheduled');
    ELSE
        IF v_p.current_order IS NOT NULL AND v_new < v_p.current_order THEN
            -- A lower order arrived: tasks above it that have not started wait again.
            UPDATE stageq.tasks SET state = 'blocked'
             WHERE process_id = p_process_id AND execution_order > v_new
               AND state IN ('available', 'scheduled');
        END IF;
        -- Open the stage: its blocked tasks take their turns from the current
        -- virtual time, in their own priority order.
        v_stride := 1000000 / v_p.weight;
        v_base := stageq_routines.stamp_base(p_process_id);
        WITH b AS (
            SELECT t.id, row_number() OVER (ORDER BY t.priority DESC, t.run_at, t.id) AS rk
              FROM stageq.tasks t
             WHERE t.process_id = p_process_id AND t.execution_order = v_new AND t.state = 'blocked'
        ), opened AS (
            UPDATE stageq.tasks t
               SET state = CASE WHEN t.run_at > now() THEN 'scheduled' ELSE 'available' END,
                   vtime = v_base + (b.rk - 1) * v_stride, process_priority = v_p.priority
              FROM b WHERE t.id = b.id
            RETURNING 1
        )
        SELECT count(*) INTO v_n FROM opened;
        IF v_n > 0 THEN
            PERFORM stageq_routines.stamp_done(p_process_id, v_base + v_n * v_stride);
            PERFORM pg_notify('stageq_tasks', '');
        END IF;
    END IF;

    v_failed := EXISTS (SELECT 1 FROM stageq.tasks WHERE process_id = p_process_id AND state = 'failed');
    UPDATE stageq.processes
       SET current_order = v_new,
           state = CASE WHEN v_failed THEN 'failed' ELSE 'active' END,
           updated_at = now(), finished_at = NULL
     WHERE id = p_process_id
       AND (current_order IS DISTINCT FROM v_new OR state <> CASE WHEN v_failed THEN 'failed' ELSE 'active' END
            OR finished_at IS NOT NULL);
END $function$;

-- Whether any task of the process's stage is waiting (not running): the stage
-- barrier's question, asked by stage_left and, written out for speed, by every
-- finish (finish_many).
-- It reads tasks_waiting from the newest entry back. The tasks a stage has
-- already handed out are mostly its oldest, and their entries stay in
-- tasks_waiting, dead, until a scan finds them dead to every transaction or
-- vacuum removes them; read forwards, each check stepped over them first
-- (about 90 a check in a drain over 100 processes, 840 in one process's
-- drain). A scalar subquery, because EXISTS would drop the ORDER BY that sets
-- the direction; the range keeps execution_order in the order the planner must
-- honour. (An order of NULL has no tasks.)
CREATE OR REPLACE FUNCTION stageq_routines.stage_waiting(p_process_id bigint, p_order integer)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    SELECT (SELECT 1 FROM stageq.tasks t
             WHERE t.process_id = p_process_id
               AND t.execution_order >= p_order AND t.execution_order <= p_order
               AND t.state <> 'running'
             ORDER BY t.process_id DESC, t.execution_order DESC LIMIT 1) IS NOT NULL
$function$;

-- Whether any task of the process's stage is left, waiting or running: a seek
-- in tasks_waiting, which leaves the running ones out, and one in
-- tasks_running.
CREATE OR REPLACE FUNCTION stageq_routines.stage_left(p_process_id bigint, p_order integer)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    SELECT stageq_routines.stage_waiting(p_process_id, p_order)
        OR EXISTS (SELECT 1 FROM stageq.tasks t
                    WHERE t.process_id = p_process_id AND t.state = 'running'
                      AND t.execution_order = p_order)
$function$;

CREATE OR REPLACE FUNCTION stageq_routines.advance(p_process_ids bigint[])
 RETURNS SETOF bigint
 LANGUAGE plpgsql
 -- For this function and open_stage, stamp_base and stamp_done under it: each
 -- reads and writes a process by its key, and a planner that judged Processes
 -- small (statistics taken before a burst of new processes) scanned all of it
 -- for each, so the stage ends of P processes read P × P rows.
 SET enable_seqscan TO 'off'
 SET jit TO 'off' -- see claim (40_claim.sql)
AS $function$
DECLARE
    v_pid bigint;
BEGIN
    FOR v_pid IN
        SELECT p.id FROM stageq.processes p
         WHERE p.id = ANY (p_process_ids) AND p.state IN ('active', 'failed')
           AND (NOT stageq_routines.stage_left(p.id, p.current_order)
                OR (p.state = 'active' AND EXISTS (SELECT 1 FROM stageq.tasks t
                                                    WHERE t.process_id = p.id AND t.state = 'failed')))
         ORDER BY p.id
    LOOP
        PERFORM 1 FROM stageq.processes WHERE id = v_pid FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            PERFORM stageq_routines.open_stage(v_pid);
        ELSE
            RETURN NEXT v_pid;
        END IF;
    END LOOP;
END $function$;

