-- Back to version 14: scheduled tasks wait as available with a future run_at,
-- which version 14's claim passes over. The table keeps version 15's CHECK,
-- which also admits 'scheduled': no statement of version 14 writes it, so
-- rebuilding the table once more would buy nothing.
DROP INDEX stageq_tasks_due;
UPDATE stageq_tasks SET state = 'available' WHERE state = 'scheduled';
UPDATE stageq_schema_floor SET oldest_binary = 13;
