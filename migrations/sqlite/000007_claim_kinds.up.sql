-- stageq 7: workers claim only the kinds they can run (issue 10, item 5). The
-- claim's filter lives in dialect/sqlite/claim.go; the kinds each worker runs
-- are recorded here (a JSON array) for `queuectl why`.
ALTER TABLE stageq_workers ADD COLUMN kinds TEXT;
