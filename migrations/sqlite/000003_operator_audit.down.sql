DROP TABLE IF EXISTS stageq_prune_status;
DROP INDEX IF EXISTS stageq_processes_finished;
UPDATE stageq_processes SET state = 'succeeded' WHERE state = 'cancelled';
DELETE FROM stageq_logs WHERE outcome IN ('cancelled', 'discarded', 'retried');
DELETE FROM stageq_schedule_runs WHERE outcome = 'failed';
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
   SET sql = replace(sql, 'CHECK (state IN (''active'', ''succeeded'', ''failed'', ''cancelled''))',
                          'CHECK (state IN (''active'', ''succeeded'', ''failed''))')
 WHERE type = 'table' AND name = 'stageq_processes';
UPDATE sqlite_schema
   SET sql = replace(sql, 'CHECK (outcome IN (''running'', ''succeeded'', ''failed'', ''abandoned'', ''released'', ''cancelled'', ''discarded'', ''retried''))',
                          'CHECK (outcome IN (''running'', ''succeeded'', ''failed'', ''abandoned'', ''released''))')
 WHERE type = 'table' AND name = 'stageq_logs';
UPDATE sqlite_schema
   SET sql = replace(sql, 'CHECK (outcome IN (''enqueued'', ''caught-up'', ''missed'', ''skipped'', ''manual'', ''failed''))',
                          'CHECK (outcome IN (''enqueued'', ''caught-up'', ''missed'', ''skipped'', ''manual''))')
 WHERE type = 'table' AND name = 'stageq_schedule_runs';
PRAGMA writable_schema = RESET;
CREATE TABLE stageq_schema_bump (x INTEGER);
DROP TABLE stageq_schema_bump;
