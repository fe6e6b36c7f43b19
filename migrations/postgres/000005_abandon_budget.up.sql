-- stageq 5 (issue 10, item 14): infrastructure faults do not burn a task's
-- attempts.
--
-- An attempt lost to infrastructure -- its worker died or froze (the lease
-- expired and was rescued), or its database connection was cut while the body
-- ran -- is "abandoned": it is not counted against the task's max_attempts,
-- which are for the task's own errors, but against a separate budget of
-- stageq.max_abandons() (10) abandoned attempts. A task abandoned that often
-- fails for good, with an error that says so: a body that kills its own worker
-- or connection must not run for ever. A connection found dead before the body
-- started (the pool handed out one the server had closed) costs nothing: the
-- worker takes another connection and starts the body there.
--
-- tasks.attempt still numbers every run (Logs.attempt), so the attempts
-- counted against max_attempts are attempt - abandons.
ALTER TABLE stageq.tasks ADD COLUMN abandons int NOT NULL DEFAULT 0;

-- The budget of abandoned attempts per task (replace the function to change it).

-- The error recorded for a task's p_n-th abandoned attempt.

-- stageq.rescue (as in version 4): an expired lease counts against the
-- task's abandon budget, not its attempts.

-- stageq.finish_many (as in version 2) also takes the outcome 'abandoned': the
-- worker lost the body's database connection while the body ran. The task
-- goes back like a released one, and counts against its abandon budget.

-- Since version 13 the functions this version created or replaced are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/postgres (see migrations/postgres/000013_routines_apart.up.sql).
-- What remains here is the version's change to the tables.
