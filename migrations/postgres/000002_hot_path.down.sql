-- Version 2 replaced the claim and completion routines and the columns they
-- kept on the process row; going back would have to rebuild version 1's run
-- queue from the tasks. stageq does not do that: restore a backup taken before
-- the upgrade, or migrate down to 0 (which drops the queue) from a binary that
-- knows version 1.
DO $$ BEGIN
    RAISE EXCEPTION 'stageq: schema version 2 cannot be migrated down to 1';
END $$;
