-- stageq 2: the hot path without a hot row.
--
-- Version 1 locked the process row in every claim (to advance its stride pass)
-- and in every completion (to re-derive its stage), and held it until the commit
-- was flushed: one process drained one transaction at a time. Here no claim and
-- no successful completion locks a shared row:
--
-- * Fairness is decided when a task becomes available, not when it is claimed.
--   Each available task carries a virtual time (weighted fair queuing): a process
--   with weight w gets tasks stamped base, base + s, base + 2s, ... with the
--   stride s = 1,000,000 / w, where base is the later of the queue's current
--   virtual time and the end of the process's own backlog (processes.vtail). A
--   claim takes the available tasks with the highest process priority and the
--   lowest virtual time (the start tag of start-time fair queuing), with FOR
--   UPDATE SKIP LOCKED, in one statement: equal
--   weights interleave processes round robin, weight 3 gets three tasks to weight
--   1's one, and a process that was idle joins at the current virtual time with
--   no burst credit.
-- * A successful completion deletes its task and closes its Logs row, and
--   nothing else. Whether it ended its stage is decided after it commits
--   (stageq.advance): whoever commits the last task of a stage sees none left,
--   locks the process row once, and opens the next stage. A crash between the
--   two is repaired by stageq.rescue, which every worker runs periodically.
-- * Tasks whose run_at lies ahead wait as 'scheduled' and are made available by
--   the claim once due, so the claim index holds only tasks that may start now.
-- * Limits (stageq.limits and processes.max_parallel) keep their locks: a limit
--   row is the one place where concurrent claims must agree. The claim takes the
--   lock-free path whenever no limit and no capped process exists.
--
-- Lock order is unchanged: process row, then limit rows, then task rows; a claim
-- never waits for a lock (SKIP LOCKED everywhere).

-- The queue's virtual clock: the newest virtual time stamped on a task. It is
-- the current virtual time when no task is available (a sequence: advancing it
-- takes no row lock and is not rolled back, so it never moves backwards).
CREATE SEQUENCE stageq.vclock MINVALUE 0 START 0;

ALTER TABLE stageq.processes
    ADD COLUMN vtail bigint NOT NULL DEFAULT 0; -- the virtual time of its last stamped task

DROP INDEX stageq.processes_queue;
DROP INDEX stageq.processes_vtime;
ALTER TABLE stageq.processes DROP COLUMN runnable, DROP COLUMN pass, DROP COLUMN ready_at;
-- The few processes that have a concurrency cap, and the unfinished ones (the
-- maintenance pass looks for stages that ended without being advanced).
CREATE INDEX processes_capped ON stageq.processes (id) WHERE max_parallel IS NOT NULL;
CREATE INDEX processes_open ON stageq.processes (id) WHERE state IN ('active', 'failed');

ALTER TABLE stageq.tasks
    ADD COLUMN vtime bigint NOT NULL DEFAULT 0,
    -- The process's priority, copied here so the claim is one index scan.
    ADD COLUMN process_priority int NOT NULL DEFAULT 0,
    DROP CONSTRAINT tasks_state_check,
    ADD CONSTRAINT tasks_state_check CHECK (state IN ('blocked', 'scheduled', 'available', 'running', 'failed'));

-- Fewer indexes per state change: a claim inserts into the primary key,
-- tasks_stage and tasks_running only (and tasks_running_limit for a task with a
-- limit key); a successful completion deletes and inserts into none.
-- (tasks_stage is the one index of every task by process: the foreign key's
-- check when a process is deleted, and the barrier, need it.)
DROP INDEX stageq.tasks_claim_process;
DROP INDEX stageq.tasks_ready;
DROP INDEX stageq.tasks_lease;
DROP INDEX stageq.tasks_worker;
DROP INDEX stageq.tasks_running_process;
DROP INDEX stageq.tasks_running_kind;
CREATE INDEX tasks_claim ON stageq.tasks (process_priority DESC, vtime, id) WHERE state = 'available';
CREATE INDEX tasks_due ON stageq.tasks (run_at) WHERE state = 'scheduled';
CREATE INDEX tasks_blocked ON stageq.tasks (process_id, execution_order) WHERE state = 'blocked';
-- Running tasks, by process: max_parallel counts them; rescue, kind limits and
-- worker listings scan them all, which is bounded by the cluster's concurrency.
CREATE INDEX tasks_running ON stageq.tasks (process_id) WHERE state = 'running';

-- Completions update the Logs row that the claim inserted: leave room on each
-- page so that the update stays on it (a HOT update touches no index).
ALTER TABLE stageq.logs SET (fillfactor = 80);
DROP INDEX stageq.logs_started;
CREATE INDEX logs_started ON stageq.logs USING brin (started_at);

-- stageq.vnow is the current virtual time for processes of priority p_priority:
-- the virtual time of the next task a claim would take at that priority, or the
-- clock when none is available.

-- stageq.stamp_base returns the virtual time from which a process's next tasks
-- are stamped: the current virtual time, or the end of its own backlog when it
-- still has tasks stamped ahead of it. The caller holds the process row lock and
-- then records the new end with stageq.stamp_done.

-- stageq.open_stage re-derives which tasks of a locked process may run: the tasks
-- of its lowest order become available (or scheduled, when their run_at lies
-- ahead), stamped with their virtual times; higher ones stay blocked. A paused
-- process has nothing available. Called with the process row locked, by submit
-- (a lower order may arrive), stageq.advance (a stage may have ended), rescue and
-- the operator's commands. Every statement is a seek on tasks_stage,
-- tasks_blocked or tasks_failed, whatever the size of the process.

-- stageq.advance is the second half of a completion, run after it committed:
-- for each process given, if its current stage has no task left (or a task
-- failed for good and the process does not say so yet), it locks the process
-- row and re-derives its stage. Committing the last task of a stage and then
-- looking means that of two completions racing for a stage's last two tasks, at
-- least the one that committed last sees none left. Idempotent. It never waits:
-- it returns the processes whose row another transaction holds (a submission
-- still open, say), for the caller to try again shortly.

-- stageq.submit inserts a batch of tasks into one process in the caller's
-- transaction. p_tasks is a JSON array of objects:
--   {"execution_order": int, "body": text, "kind": text, "max_attempts": int,
--    "priority": int, "atomic": bool, "run_at": timestamptz, "delay_ms": bigint,
--    "limit_key": text}
-- Returns the new task ids in the order given. Tasks of the stage that is open
-- are stamped with their virtual times here; the others when it opens.

-- stageq.validate_tasks raises 22023 (invalid_parameter_value) for a submission
-- the queue must refuse; stageq.submit calls it before writing anything.

-- stageq.claim leases up to p_max available tasks to worker p_worker with token
-- p_token for p_lease_ms and returns them (the caller opens their Logs rows in
-- the same statement).
--
-- First, scheduled tasks that are due become available, stamped from the
-- current virtual time (a process's delayed tasks take turns with the others
-- instead of arriving as a burst). Then the claim serves the highest process
-- priority that has available tasks, and a lower one only once that priority
-- has none left that this claim could take: priority stays strict even while
-- another claim holds the higher tasks' row locks (that claim will take them).
--
-- When no limit row and no capped process exists, a priority level is served
-- by one UPDATE of the head of tasks_claim with FOR UPDATE SKIP LOCKED: no
-- shared row is locked, so claims and completions of one process run side by
-- side. Otherwise (stageq.claim_gated) each candidate is admitted one by one.
--
-- enable_sort = off: every query here has an index in its ORDER BY's order.

-- stageq.claim_gated is stageq.claim's path when concurrency limits exist. Each
-- candidate, in claim order, is locked alone (SKIP LOCKED: another claim's is
-- passed over) and admitted when its capped process's row and each limit row
-- that applies can be locked (SKIP LOCKED again: held by another claim counts as
-- full) and their running tasks, counted in a statement whose snapshot sees
-- every claim that held the lock before, leave a slot. A candidate that is not
-- admitted loses its turn: it goes behind the current virtual time. Further
-- candidates of a full process or limit are skipped in this claim, and a lower
-- priority is served only when nothing at a higher one could be taken for a
-- limit (not for a lock).

-- stageq.finish_many ends many attempts in one transaction: p_ids, p_tokens,
-- p_outcomes ('succeeded', 'failed' or 'released'), p_errors and p_retry_ms are
-- parallel arrays; with 'failed', p_retry_ms > 0 schedules another attempt and
-- 0 fails the task for good. Each result is fenced by its token: one whose token
-- no longer holds its task changes nothing. Returns a row per attempt recorded,
-- and, separately, each process whose current stage this batch may have ended
-- (task_id NULL): the caller passes those to stageq.advance after committing.
--
-- Succeeded tasks are deleted without touching their process: the hot path.
-- Tasks handed back (a retry, a release) or failed for good lock their process
-- row first (in id order, as every writer does), so that a lower order
-- submitted meanwhile cannot be missed and a final failure marks its process
-- failed in the same transaction. Those are the exceptions, not the flow.

-- stageq.finish ends one attempt, as stageq.finish_many does many. Returns
-- whether the token still held the task; the caller runs stageq.advance for the
-- task's process once its transaction committed.

-- stageq.rescue returns up to p_max tasks whose lease expired to the queue, or
-- fails them when they are out of attempts, and closes their Logs rows as
-- abandoned. It then repairs up to p_max processes whose stage ended without
-- being advanced (a worker died between a completion and its stageq.advance).

-- stageq.configure changes a locked process's scheduling. p_priority, p_weight
-- and p_max_parallel are NULL to keep them; p_max_parallel 0 removes the cap. A
-- new priority reaches the tasks already waiting (the claim orders by their
-- copy of it); a new weight re-spaces the turns of the tasks already stamped,
-- from the earliest of them, so a plan's weight applies to its own tasks.

-- Since version 13 the functions this version created or replaced are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/postgres (see migrations/postgres/000013_routines_apart.up.sql).
-- What remains here is the version's change to the tables.
