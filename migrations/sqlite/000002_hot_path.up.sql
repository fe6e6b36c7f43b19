-- stageq 2: fairness decided when a task becomes available, the same algorithm
-- as PostgreSQL's version 2 (see migrations/postgres/000002_hot_path.up.sql).
-- Each available task carries a virtual start time (weighted fair queuing): a
-- process of weight w has its tasks stamped base, base + s, base + 2s, ... with
-- s = 1,000,000 / w, from the later of the queue's current virtual time and the
-- end of its own backlog (stageq_processes.vtail). A claim takes the available
-- tasks of the highest process priority with the lowest virtual times, in one
-- statement, instead of one turn per process on the process rows.
--
-- SQLite runs one writer at a time, so nothing here is about locks: a
-- completion still opens the next stage in its own transaction. A task whose
-- run_at lies ahead stays 'available' and the claim passes over it.

ALTER TABLE stageq_tasks ADD COLUMN vtime INTEGER NOT NULL DEFAULT 0;
-- The process's priority, copied here so the claim is one index scan.
ALTER TABLE stageq_tasks ADD COLUMN process_priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE stageq_processes ADD COLUMN vtail INTEGER NOT NULL DEFAULT 0;

-- The newest virtual time stamped: the current one when nothing is available.
CREATE TABLE stageq_vclock (v INTEGER NOT NULL);
INSERT INTO stageq_vclock (v) VALUES (0);

DROP INDEX stageq_processes_queue;
DROP INDEX stageq_processes_vtime;
ALTER TABLE stageq_processes DROP COLUMN runnable;
ALTER TABLE stageq_processes DROP COLUMN pass;
ALTER TABLE stageq_processes DROP COLUMN ready_at;

DROP INDEX stageq_tasks_claim_process;
DROP INDEX stageq_tasks_ready;
CREATE INDEX stageq_tasks_claim ON stageq_tasks (process_priority DESC, vtime, id) WHERE state = 'available';
-- The tasks a stage opens: a seek, however many of the stage are available.
CREATE INDEX stageq_tasks_blocked ON stageq_tasks (process_id, execution_order) WHERE state = 'blocked';
