-- Version 15 gives SQLite the 'scheduled' state that this dialect has had
-- since version 2 (migrations/sqlite/000015_scheduled_state.up.sql): no change
-- here; the file keeps the three dialects' version numbers aligned, and the
-- floor stays where it was, so workers of version 14 keep running.
SELECT 1;
