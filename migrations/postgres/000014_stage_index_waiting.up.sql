-- Version 14: a claim no longer writes to an index of every task by process.
--
-- A claim turns a task from available to running. In PostgreSQL that UPDATE
-- changes a column that partial indexes' predicates read (state), so it is
-- never a HOT update: the new row version is entered in every index whose
-- predicate it meets. tasks_stage (process_id, execution_order) had none, so
-- every claim wrote an entry there: one of the claim's three index writes.
--
-- tasks_waiting keeps that key for the tasks that are not running, and
-- tasks_running gains execution_order after process_id, so that what asked
-- tasks_stage about running tasks too (a process's lowest stage, whether a
-- stage is empty, the lower stages a task waits for) now asks tasks_running
-- for them with a seek, not a walk of the process's running tasks
-- (routines/postgres version 4; dialect/postgres's inspect and prune
-- statements). The stage barrier's own question, "is any task of the open
-- stage not running?", is exactly tasks_waiting's predicate.
--
-- The foreign key from tasks to processes goes with it: checking it when a
-- process is deleted needs an index of every task by process (tasks_stage was
-- kept for that), and without one each deleted process would scan Tasks. The
-- routines keep its promise themselves. Only the prune deletes a process: one
-- that has ended, under its row lock, when no task of it is left. A submission
-- takes that lock (its upsert of the process) before it adds tasks, so a
-- prune skips a process being filled, and a submission that waited for a
-- prune's delete creates the process anew (dialect/postgres/prune.go;
-- conformance's TestPruneSkipsAProcessBeingFilled). Each inserted task also
-- no longer looks its process up and locks it KEY SHARE.
--
-- SQLite and SQL Server update only the indexes whose columns a statement
-- changes, so their stage indexes never took this write; their version 14
-- changes nothing.
--
-- The floor stays at 13: version-13 workers still running during a rolling
-- upgrade run on these tables (their statements need no index to be right),
-- but their routines (version 3) find a
-- process's lowest stage, and whether its open stage emptied, by scanning
-- Tasks until they are replaced.

-- Version-13 workers keep running while this migrates (a rolling upgrade),
-- and their transactions lock processes and tasks in either order; taken one
-- at a time, as the statements below would take them, this migration and a
-- worker could each wait for the other until PostgreSQL's deadlock check
-- ended one, and a migration that fails leaves golang-migrate's version
-- dirty. So both tables are locked first, together, and a try that has waited
-- a second or met a deadlock lets go of both and tries again, letting the
-- workers' transactions pass in between. While the indexes build, every
-- worker waits (0.9 s for this file on 1,001,000 queued tasks, none running,
-- on the 2-core development machine).
DO $$
BEGIN
    LOOP
        BEGIN
            PERFORM set_config('lock_timeout', '1s', true);
            LOCK TABLE stageq.processes, stageq.tasks IN ACCESS EXCLUSIVE MODE;
            EXIT;
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            PERFORM pg_sleep(0.1);
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', '0', true);
END $$;

CREATE INDEX tasks_waiting ON stageq.tasks (process_id, execution_order) WHERE state <> 'running';
DROP INDEX stageq.tasks_stage;
DROP INDEX stageq.tasks_running;
CREATE INDEX tasks_running ON stageq.tasks (process_id, execution_order) WHERE state = 'running';
ALTER TABLE stageq.tasks DROP CONSTRAINT tasks_process_id_fkey;
