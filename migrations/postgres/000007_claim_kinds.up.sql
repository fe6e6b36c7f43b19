-- stageq 7: workers claim only the kinds they can run (issue 10, item 5).
--
-- A worker passes the kinds it has a way to run (SQL bodies, exec when it
-- allows programs, its registered handlers) to stageq.claim, which leases
-- nothing else: a task of a kind no live worker runs stays available, visibly
-- (`queuectl why`), instead of burning its attempts on "no handler". The kinds
-- are a filter on the claim index's walk, not a key of it: the walk still
-- starts at the head in claim order; tasks of kinds this worker cannot run
-- that sit ahead of its own are stepped over (one heap visit each), which
-- costs nothing in the usual queue where every worker runs every kind.
-- NULL kinds: every kind (tools and benchmarks).
--
-- Workers record their kinds (a JSON array) so that `queuectl why` can say
-- which kinds no live worker runs.
--
-- The claim also returns each task's process name, read inside the functions.
-- Until version 6 the caller joined the processes table around the call, in
-- the outer statement's snapshot; the function's own statements (it is
-- volatile) take later ones, so a task submitted with a new process by a
-- transaction that committed in between was leased by the function but lost
-- in the outer join: no Logs row, not handed to the worker, held until its
-- lease expired. Seen with a schedule's first tick (conformance
-- TestScheduleMissedTicks); any first submit of a process could hit it.

ALTER TABLE stageq.workers ADD COLUMN kinds text;

-- Since version 13 the functions this version created or replaced are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/postgres (see migrations/postgres/000013_routines_apart.up.sql).
-- What remains here is the version's change to the tables.
