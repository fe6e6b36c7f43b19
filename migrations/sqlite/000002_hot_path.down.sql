-- Version 2 replaced the process rows' run queue with virtual times on the
-- tasks; rebuilding version 1's run queue from them is not done. Restore a
-- backup taken before the upgrade instead. (This statement fails on purpose.)
SELECT * FROM "stageq: schema version 2 cannot be migrated down to 1";
