-- stageq 4 (issue 10, item 15): Logs.session names the database session that ran
-- an attempt's body, so that the rescue of a dead worker's lease can end a body
-- still running in the server (PostgreSQL). SQLite runs bodies inside the worker
-- process: a killed worker's body dies with it, so the column stays empty here
-- and exists for the same schema everywhere.
ALTER TABLE stageq_logs ADD COLUMN session INTEGER;
