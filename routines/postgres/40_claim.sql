-- The claim: up to p_max available tasks, skip-locked, in fairness order,
-- admitted under every concurrency limit (slot_check); claim_gated is the
-- path taken when a limit or a process cap applies.

-- slot_check says whether one more task may run under a limit: 'admits',
-- 'full', 'none' (no such limit, or it was removed while the claim waited)
-- or 'busy' (another transaction holds the limit's row). The limit is
-- process p_process's max_parallel (its row is the lock) when p_process is
-- set, else limit p_limit of stageq.limits; its slots in use are the running
-- tasks of that process, of limit key p_key, or, p_key NULL, of kind p_kind
-- (slot_used), counted under the row's lock, which the claim keeps until it
-- commits. locked: the claim holds the row now, whatever the verdict.
-- waited: it waited for the row, granted or not.
--
-- Claims hold such a row while they count, for the few milliseconds of the
-- claim. Workers woken together by one submission all reach it at once, and
-- a claim that read past the held row took its tasks for full: it claimed
-- none and its worker slept a whole poll (8 s to start 6 tasks under a limit
-- of 6, or of a process capped at 6, with three workers of two slots and a
-- 20 s poll-max). So a claim may wait its turn (p_wait), for 50 ms at most,
-- and claim_gated lets it do so once, and only while it holds no such row:
-- every other lock a claim takes skips what is locked, so two claims never
-- wait for each other, and claim_gated takes a task's row only after its
-- limits', as every writer does (process row, then its tasks), so no cycle
-- forms with a pause or a submission either. The bound keeps a transaction
-- that holds the row for long (an operator's, by hand; an application's
-- submission into a capped process) from stopping other work: while one
-- does, each claim that meets it loses up to 50 ms (claims hold the row for
-- milliseconds). After a wait claim_gated reads its candidates again: the
-- ones it read before are what the holder had not yet claimed, or capped.
--
-- A limit already full is not waited for: a look without the lock says so,
-- and the claim passes it by at once. (A capped process with a backlog is
-- full most of the time and its tasks stay at the head of the fair-share
-- order; had every claim queued on its row to find that out, claims under
-- contention fell by a third.)
CREATE OR REPLACE FUNCTION stageq_routines.slot_check(p_process bigint, p_limit text, p_key text, p_kind text,
                                                      p_wait boolean, OUT verdict text, OUT locked boolean, OUT waited boolean)
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_max int;
BEGIN
    waited := false;
    IF p_process IS NOT NULL THEN
        SELECT max_parallel INTO v_max FROM stageq.processes WHERE id = p_process FOR UPDATE SKIP LOCKED;
    ELSE
        SELECT max_running INTO v_max FROM stageq.limits WHERE key = p_limit FOR UPDATE SKIP LOCKED;
    END IF;
    locked := FOUND;
    IF NOT locked THEN
        -- Held elsewhere, or not there: a look without the lock tells which.
        v_max := stageq_routines.slot_max(p_process, p_limit, false);
        IF v_max IS NULL THEN
            verdict := 'none'; -- no such limit, or the cap lifted, as committed
            RETURN;
        ELSIF v_max <= stageq_routines.slot_used(p_process, p_key, p_kind) THEN
            verdict := 'full';
            RETURN;
        END IF;
        IF NOT p_wait THEN
            verdict := 'busy';
            RETURN;
        END IF;
        waited := true;
        BEGIN
            v_max := stageq_routines.slot_max(p_process, p_limit, true);
            locked := true;
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            verdict := 'busy';
            RETURN;
        END;
    END IF;
    IF v_max IS NULL THEN
        verdict := 'none';
    ELSIF stageq_routines.slot_used(p_process, p_key, p_kind) < v_max THEN
        verdict := 'admits';
    ELSE
        verdict := 'full';
    END IF;
END $function$;

-- slot_max reads slot_check's limit: with p_lock, under the row's lock,
-- waited for 50 ms at most; without, as committed.
CREATE OR REPLACE FUNCTION stageq_routines.slot_max(p_process bigint, p_limit text, p_lock boolean)
 RETURNS integer
 LANGUAGE plpgsql
 SET lock_timeout TO '50ms'
AS $function$
DECLARE
    v_max int;
BEGIN
    IF p_lock AND p_process IS NOT NULL THEN
        SELECT max_parallel INTO v_max FROM stageq.processes WHERE id = p_process FOR UPDATE;
    ELSIF p_lock THEN
        SELECT max_running INTO v_max FROM stageq.limits WHERE key = p_limit FOR UPDATE;
    ELSIF p_process IS NOT NULL THEN
        SELECT max_parallel INTO v_max FROM stageq.processes WHERE id = p_process;
    ELSE
        SELECT max_running INTO v_max FROM stageq.limits WHERE key = p_limit;
    END IF;
    RETURN v_max;
END $function$;

-- slot_used counts slot_check's slots in use.
CREATE OR REPLACE FUNCTION stageq_routines.slot_used(p_process bigint, p_key text, p_kind text)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF p_process IS NOT NULL THEN
        RETURN (SELECT count(*) FROM stageq.tasks WHERE process_id = p_process AND state = 'running');
    ELSIF p_key IS NOT NULL THEN
        RETURN (SELECT count(*) FROM stageq.tasks WHERE limit_key = p_key AND state = 'running');
    END IF;
    RETURN (SELECT count(*) FROM stageq.tasks WHERE kind = p_kind AND state = 'running');
END $function$;

CREATE OR REPLACE FUNCTION stageq_routines.claim_gated(p_max integer, p_worker text, p_token bigint, p_expires timestamp with time zone, p_kinds text[])
 RETURNS SETOF stageq_routines.claimed
 LANGUAGE plpgsql
 SET enable_sort TO 'off'
AS $function$
DECLARE
    v_got       int := 0;
    v_top       int;
    v_prev      int;
    v_cand      record;
    v_task      stageq.tasks;
    v_out       stageq_routines.claimed;
    v_fullp     bigint[] := '{}'; -- capped processes found full or busy
    v_fullk     text[] := '{}';   -- limit keys found full or busy
    v_fullkind  text[] := '{}';   -- kinds found full or busy
    v_ok        boolean;
    v_bump      boolean;  -- a task passed over moves back in the fairness order
    v_which     text;     -- which limit of a task: 'process' (max_parallel), 'key', 'kind'
    v_verdict   text;     -- slot_check's
    v_slot      record;   -- slot_check's verdict, locked, waited
    v_holds     boolean := false; -- this claim holds a limit's or a capped process's row
    v_waited    boolean := false; -- this claim has waited for one: it waits once
    v_may_wait  boolean;
    v_busy      boolean;
    v_seen      int;
    v_restart   boolean := false; -- waited: the cursor's snapshot is stale
    -- A wait is of use only to a count in a snapshot taken after it. The
    -- worker's sessions are READ COMMITTED (dialect/postgres, readCommittedSQL);
    -- one that is not (a pooler's server connection that missed the setting,
    -- a caller of its own) reads past held rows, as version 10 did.
    v_read_committed boolean := current_setting('transaction_isolation') = 'read committed';
    -- The kinds a limit names, read once: a task of another kind has no kind
    -- limit to check (one call saved per task; a kind limit set meanwhile
    -- counts from the next claim, as any new limit does).
    v_limited_kinds  text[] := ARRAY(SELECT substr(key, 6) FROM stageq.limits WHERE key LIKE 'kind:%');
BEGIN
    LOOP
        SELECT t.process_priority INTO v_top FROM stageq.tasks t
         WHERE t.state = 'available' AND (v_prev IS NULL OR t.process_priority < v_prev)
           AND (p_kinds IS NULL OR t.kind = ANY (p_kinds))
         ORDER BY t.process_priority DESC, t.vtime, t.id LIMIT 1;
        EXIT WHEN NOT FOUND;
        v_busy := false;
        v_seen := 0;
        FOR v_cand IN
            SELECT t.id, t.process_id, t.kind, t.limit_key, p.max_parallel, p.priority, p.weight, p.name
              FROM stageq.tasks t JOIN stageq.processes p ON p.id = t.process_id
             WHERE t.state = 'available' AND t.process_priority = v_top
               AND t.process_id <> ALL (v_fullp)
               AND (t.limit_key IS NULL OR t.limit_key <> ALL (v_fullk))
               AND t.kind <> ALL (v_fullkind)
               AND (p_kinds IS NULL OR t.kind = ANY (p_kinds))
             ORDER BY t.process_priority DESC, t.vtime, t.id
             LIMIT p_max + 16
        LOOP
            v_seen := v_seen + 1;
            CONTINUE WHEN v_cand.process_id = ANY (v_fullp)
                       OR v_cand.limit_key = ANY (v_fullk) OR v_cand.kind = ANY (v_fullkind);
            -- Its limits first (slot_check says why), then the task.
            v_ok := true;
            v_bump := true;
            FOREACH v_which IN ARRAY ARRAY['process', 'key', 'kind'] LOOP
                CONTINUE WHEN (v_which = 'process' AND v_cand.max_parallel IS NULL)
                           OR (v_which = 'key' AND v_cand.limit_key IS NULL)
                           OR (v_which = 'kind' AND v_cand.kind <> ALL (v_limited_kinds));
                v_may_wait := v_read_committed AND NOT v_holds AND NOT v_waited;
                v_slot := stageq_routines.slot_check(
                              CASE v_which WHEN 'process' THEN v_cand.process_id END,
                              CASE v_which WHEN 'key' THEN v_cand.limit_key WHEN 'kind' THEN 'kind:' || v_cand.kind END,
                              CASE v_which WHEN 'key' THEN v_cand.limit_key END,
                              v_cand.kind, v_may_wait);
                v_verdict := v_slot.verdict;
                v_holds := v_holds OR v_slot.locked;
                v_restart := v_restart OR v_slot.waited;
                v_waited := v_waited OR v_slot.waited;
                CONTINUE WHEN v_verdict IN ('admits', 'none');
                v_ok := false;
                -- A busy limit says nothing of its tasks: they keep their
                -- place in the fairness order, and this claim passes them by.
                v_bump := v_verdict = 'full';
                IF v_which = 'process' THEN
                    v_fullp := v_fullp || v_cand.process_id;
                ELSIF v_which = 'key' THEN
                    v_fullk := v_fullk || v_cand.limit_key;
                ELSE
                    v_fullkind := v_fullkind || v_cand.kind;
                END IF;
                EXIT;
            END LOOP;
            -- A busy limit leaves the task alone (not even locked).
            IF v_ok OR v_bump THEN
                PERFORM 1 FROM stageq.tasks WHERE id = v_cand.id AND state = 'available' FOR UPDATE SKIP LOCKED;
                IF NOT FOUND THEN
                    v_busy := true; -- another claim's, or already taken
                ELSIF v_ok THEN
                    UPDATE stageq.tasks t
                       SET state = 'running', attempt = t.attempt + 1, worker_id = p_worker,
                           lease_token = p_token, lease_expires_at = p_expires
                     WHERE t.id = v_cand.id
                    RETURNING t.* INTO v_task;
                    v_out := ROW(v_task.id, v_task.process_id, v_cand.name, v_task.execution_order, v_task.kind,
                                 v_task.body, v_task.attempt, v_task.max_attempts, v_task.atomic, v_task.abandons,
                                 v_task.schedule_name, v_task.scheduled_for);
                    RETURN NEXT v_out;
                    v_got := v_got + 1;
                ELSE
                    UPDATE stageq.tasks
                       SET vtime = greatest(vtime, stageq_routines.vnow(v_cand.priority) + 1000000 / v_cand.weight)
                     WHERE id = v_cand.id;
                END IF;
            END IF;
            -- After its one wait the claim reads its candidates again (slot_check).
            EXIT WHEN v_got >= p_max OR v_restart;
        END LOOP;
        EXIT WHEN v_got >= p_max;
        IF v_restart THEN
            v_restart := false; -- once: a claim waits once at most
            CONTINUE;           -- the same level, in a snapshot after the wait
        END IF;
        EXIT WHEN v_busy;
        IF v_seen >= p_max + 16 THEN
            CONTINUE; -- the same priority again, past the full ones
        END IF;
        v_prev := v_top;
    END LOOP;
END $function$;

CREATE OR REPLACE FUNCTION stageq_routines.claim(p_max integer, p_worker text, p_token bigint, p_lease_ms bigint, p_kinds text[])
 RETURNS SETOF stageq_routines.claimed
 LANGUAGE plpgsql
 SET enable_sort TO 'off'
 -- Every statement here has an index to seek (tasks_claim, tasks_due, the
 -- keys, processes_capped); see the processes' names below.
 SET enable_seqscan TO 'off'
 -- With sequential scans off, a statement that has no other path (the read of
 -- sequence stageq.vclock in vnow and stamp_done, under open_stage) is still
 -- planned, at a cost over 10^10: far past jit_above_cost, so PostgreSQL
 -- compiled it to machine code on every call, 9 ms each (seen: stage handoffs
 -- took 28 ms instead of 1.6 ms). enable_sort off could do the same to a
 -- statement that must sort (none seen). Nothing here gains by JIT.
 SET jit TO 'off'
 -- Each join here is a key probe per row of a small batch. With a batch of
 -- 1,000 due tasks beside a tasks table of 50,000, the planner costed the
 -- probes above one walk of the whole primary key into a hash (36 ms of a
 -- 49 ms write-back, seen), and a merge join would walk it too. (claim_gated,
 -- which sets neither, runs under these too: its one join is such a probe.)
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
DECLARE
    v_expires timestamptz := now() + p_lease_ms * interval '1 millisecond';
    v_got     int := 0;
    v_n       int;
    v_top     int;
    v_due     bigint[];
    v_vts     bigint[];
    v_gone    bigint[];
BEGIN
    IF EXISTS (SELECT 1 FROM stageq.tasks WHERE state = 'scheduled' AND run_at <= now()) THEN
        -- Due tasks become available, each stamped with a virtual time behind
        -- the head of its priority, spaced by its process's weight. Each due
        -- task's process is read by a key probe, and the tasks are written
        -- back by key, from arrays: joined instead, the planner (sorts and
        -- sequential scans off) walked every process once per due task to
        -- keep the window's order, and then read the whole tasks table to
        -- write 1,000 rows back (seen: 2.5 s a claim with 50,000 processes
        -- that each had a retry due). The head is read once per priority.
        WITH due AS (
            SELECT t.id, t.process_id FROM stageq.tasks t
             WHERE t.state = 'scheduled' AND t.run_at <= now()
             ORDER BY t.run_at LIMIT 1000
               FOR UPDATE SKIP LOCKED
        ), owned AS MATERIALIZED (
            SELECT d.id, d.process_id,
                   (SELECT ARRAY[p.priority, p.weight] FROM stageq.processes p WHERE p.id = d.process_id) AS pw
              FROM due d
        ), heads AS MATERIALIZED (
            SELECT h.priority, stageq_routines.vnow(h.priority) AS vnow
              FROM (SELECT DISTINCT o.pw[1] AS priority FROM owned o WHERE o.pw IS NOT NULL) h
        )
        SELECT array_agg(r.id) FILTER (WHERE r.pw IS NOT NULL),
               array_agg(r.vt) FILTER (WHERE r.pw IS NOT NULL),
               array_agg(r.id) FILTER (WHERE r.pw IS NULL)
          INTO v_due, v_vts, v_gone
          FROM (SELECT o.id, o.pw,
                       (SELECT h.vnow FROM heads h WHERE h.priority = o.pw[1])
                       + (row_number() OVER (PARTITION BY o.process_id ORDER BY o.id) - 1) * (1000000 / o.pw[2]) AS vt
                  FROM owned o) r;
        IF v_gone IS NOT NULL THEN
            -- A due task whose process was deleted by hand (60_rescue.sql says
            -- how that happens) would stay scheduled and be taken into due
            -- again by every claim, oldest first: 1,000 of them would keep
            -- every other scheduled task from ever becoming available. It
            -- goes, and Logs says so (its last row, a failure, promised a
            -- retry): cancelled, under the process's newest name in Logs.
            WITH gone AS (
                DELETE FROM stageq.tasks t USING unnest(v_gone) AS g(id) WHERE t.id = g.id
                RETURNING t.*
            )
            INSERT INTO stageq.logs (task_id, process_id, process_name, execution_order, kind, body, worker_id,
                                     attempt, lease_token, started_at, ended_at, duration_ms, outcome, error,
                                     schedule_name, scheduled_for)
            SELECT d.id, d.process_id,
                   coalesce((SELECT l.process_name FROM stageq.logs l WHERE l.process_id = d.process_id
                              ORDER BY l.started_at DESC LIMIT 1),
                            'process ' || d.process_id || ' (deleted)'),
                   d.execution_order, d.kind, d.body, p_worker, d.attempt, 0, now(), now(), 0, 'cancelled',
                   'its process (id ' || d.process_id || ') no longer exists: task removed', d.schedule_name, d.scheduled_for
              FROM gone d;
        END IF;
        IF v_due IS NOT NULL THEN
            UPDATE stageq.tasks t SET state = 'available', vtime = r.vt
              FROM unnest(v_due, v_vts) AS r(id, vt) WHERE t.id = r.id;
        END IF;
    END IF;

    IF EXISTS (SELECT 1 FROM stageq.limits)
       OR EXISTS (SELECT 1 FROM stageq.processes WHERE max_parallel IS NOT NULL) THEN
        RETURN QUERY SELECT * FROM stageq_routines.claim_gated(p_max, p_worker, p_token, v_expires, p_kinds);
        RETURN;
    END IF;

    LOOP
        -- The head's priority, locked or not: its tasks go first.
        SELECT t.process_priority INTO v_top FROM stageq.tasks t
         WHERE t.state = 'available' AND (p_kinds IS NULL OR t.kind = ANY (p_kinds))
         ORDER BY t.process_priority DESC, t.vtime, t.id LIMIT 1;
        EXIT WHEN NOT FOUND;
        RETURN QUERY
            WITH c AS MATERIALIZED (
                SELECT t.ctid AS tid FROM stageq.tasks t
                 WHERE t.state = 'available' AND t.process_priority = v_top
                   AND (p_kinds IS NULL OR t.kind = ANY (p_kinds))
                 ORDER BY t.process_priority DESC, t.vtime, t.id
                 LIMIT p_max - v_got
                   FOR UPDATE SKIP LOCKED
            )
            , u AS (
                UPDATE stageq.tasks t
                   SET state = 'running', attempt = t.attempt + 1, worker_id = p_worker,
                       lease_token = p_token, lease_expires_at = v_expires
                  -- By the row's address: the lock taken above keeps it in place, and
                  -- a second descent of the primary key per task is saved.
                  FROM c WHERE t.ctid = c.tid
                RETURNING t.*
            )
            -- In this statement's snapshot, which sees every task it leased, so
            -- their processes too. A key probe per task (enable_seqscan off):
            -- joined, or probed with a sequential scan, the planner read every
            -- process once per task taken whenever Processes looked small (a
            -- few pages, or statistics taken before a burst of new processes):
            -- 15,569 rows for 322 tasks, 2 ms of a 5.5 ms claim, in a drain
            -- over 100 processes. A task whose process row is gone (only a
            -- hand-made DELETE does that since migration 14 dropped the foreign
            -- key) is left out, as the join left it out: with a NULL name the
            -- claim's Logs row would fail, and every claim after it. (OFFSET 0
            -- keeps the probe to one per task.)
            SELECT n.* FROM (
                SELECT u.id, u.process_id, (SELECT p.name FROM stageq.processes p WHERE p.id = u.process_id) AS name,
                       u.execution_order, u.kind, u.body, u.attempt,
                       u.max_attempts, u.atomic, u.abandons, u.schedule_name, u.scheduled_for
                  FROM u OFFSET 0) n
             WHERE n.name IS NOT NULL;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_got := v_got + v_n;
        -- Nothing taken: what is left at this priority is another claim's.
        EXIT WHEN v_n = 0 OR v_got >= p_max;
    END LOOP;
END $function$;

