-- Version 2 replaced the claim and completion procedures and the run-queue
-- columns they kept on the process row; going back would have to rebuild version
-- 1's run queue from the tasks. stageq does not do that: restore a backup taken
-- before the upgrade, or migrate down to 0 (which drops the queue) from a binary
-- that knows version 1. THROW (severity 16) ends the batch, so nothing changes.
-- https://learn.microsoft.com/sql/t-sql/language-elements/throw-transact-sql
THROW 50030, N'stageq: schema version 2 cannot be migrated down to 1', 1;
