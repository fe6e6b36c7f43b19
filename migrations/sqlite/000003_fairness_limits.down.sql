-- Undo 000003.
DROP INDEX IF EXISTS stageq_processes_vtime;
DROP INDEX IF EXISTS stageq_processes_queue;
DROP INDEX IF EXISTS stageq_tasks_running_kind;
DROP INDEX IF EXISTS stageq_tasks_running_limit;
DROP INDEX IF EXISTS stageq_tasks_running_process;
DROP INDEX IF EXISTS stageq_tasks_ready;
DROP INDEX IF EXISTS stageq_tasks_claim_process;
CREATE INDEX stageq_tasks_claim ON stageq_tasks (priority DESC, run_at, id) WHERE state = 'available';
DROP TABLE IF EXISTS stageq_limits;
ALTER TABLE stageq_tasks DROP COLUMN limit_key;
ALTER TABLE stageq_processes DROP COLUMN ready_at;
ALTER TABLE stageq_processes DROP COLUMN runnable;
ALTER TABLE stageq_processes DROP COLUMN pass;
ALTER TABLE stageq_processes DROP COLUMN paused;
ALTER TABLE stageq_processes DROP COLUMN max_parallel;
ALTER TABLE stageq_processes DROP COLUMN weight;
ALTER TABLE stageq_processes DROP COLUMN priority;
