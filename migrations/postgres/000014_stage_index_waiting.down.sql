-- Back to version 13's stage index over every task, and its foreign key.
CREATE INDEX tasks_stage ON stageq.tasks (process_id, execution_order);
DROP INDEX stageq.tasks_waiting;
DROP INDEX stageq.tasks_running;
CREATE INDEX tasks_running ON stageq.tasks (process_id) WHERE state = 'running';
ALTER TABLE stageq.tasks ADD CONSTRAINT tasks_process_id_fkey FOREIGN KEY (process_id) REFERENCES stageq.processes (id);
