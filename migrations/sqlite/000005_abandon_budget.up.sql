-- stageq 5 (issue 10, item 14): an attempt lost to infrastructure (its worker
-- died: the lease expired and was rescued) counts against a separate budget of
-- 10 abandoned attempts (dialect/sqlite: maxAbandons), not the task's
-- max_attempts. attempt still numbers every run; the attempts counted against
-- max_attempts are attempt - abandons.
ALTER TABLE stageq_tasks ADD COLUMN abandons INTEGER NOT NULL DEFAULT 0;
