-- Version 14 narrows PostgreSQL's stage index to the tasks that are not
-- running and drops its foreign key from tasks to processes, which needed an
-- index of every task by process
-- (migrations/postgres/000014_stage_index_waiting.up.sql), to spare every
-- claim a write there. This dialect updates only the indexes whose columns a
-- statement changes, so a claim never wrote to its stage index, and that
-- index still serves its foreign key's check: no change here; the file keeps
-- the three dialects' version numbers aligned.
SELECT 1;
