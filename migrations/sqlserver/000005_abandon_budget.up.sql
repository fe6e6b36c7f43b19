-- Version 5 charges attempts lost to a dead worker or a cut connection to a
-- budget of their own (migrations/postgres/000005_abandon_budget.up.sql).
-- NOT YET ON SQL SERVER: Tasks.abandons and the Rescue / FinishMany changes are
-- issue 10's open SQL Server work; a rescued attempt still counts against
-- max_attempts there. The file keeps the dialects' version numbers aligned.
SELECT 1;
