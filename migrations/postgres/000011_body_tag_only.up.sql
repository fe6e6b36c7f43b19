-- Version 11: a body's start writes nothing.
--
-- Since version 4 the worker's first statement on a body's connection
-- (stageq.body_session) named the session after the attempt and wrote its
-- backend pid into the attempt's Logs row, which the rescue joined with
-- pg_stat_activity to find a dead worker's body. That write was a transaction
-- of its own per SQL body (a Logs row version, its commit record): the largest
-- cost a `SELECT 1` body added to a no-op task. The name alone finds the body:
-- stageq.body_tag holds the task and its lease token, which no other attempt
-- shares, so the rescue now looks the session up by name, and body_session only
-- sets the name and reads whether the attempt still runs. Logs loses its
-- session column; a body's backend is visible in pg_stat_activity under its tag
-- while it runs.

-- stageq.body_backend: the backend running the attempt's body, if one is running
-- a statement now (a session idle between statements runs nothing). A session
-- keeps the name after its body; workers run nothing but bodies on such
-- sessions (a pool of their own), and each body renames its session first. The
-- caller's own session is never the body: it is running this.

-- stageq.rescue (as in version 5) finds a dead worker's body by its name.

ALTER TABLE stageq.logs DROP COLUMN session;

-- Since version 13 the functions this version created or replaced are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/postgres (see migrations/postgres/000013_routines_apart.up.sql).
-- What remains here is the version's change to the tables.
