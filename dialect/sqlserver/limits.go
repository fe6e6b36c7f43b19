package sqlserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/stageq/stageq/dialect"
)

// Limits live in stageq.Limits (named keys and 'kind:KIND') and in
// Processes.max_parallel ('process:NAME'). None is a counter: the slots in use
// are the running tasks that match, counted by stageq.Claim under the limit row's
// update lock, so a change takes effect at the next claim and a crashed holder's
// slot returns exactly when its lease is rescued.

// limitUpsertSQL creates or changes a limit. In: key, max. UPDLOCK + SERIALIZABLE
// make "update, else insert" atomic.
const limitUpsertSQL = `
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @Key nvarchar(205) = @pKey,
        @Max int = @pMax;
BEGIN TRANSACTION;
UPDATE l SET max_running = @Max, updated_at = SYSUTCDATETIME()
  FROM stageq.Limits AS l WITH (UPDLOCK, SERIALIZABLE, ROWLOCK)
 WHERE l.[key] = @Key;
IF @@ROWCOUNT = 0
    INSERT INTO stageq.Limits ([key], max_running) VALUES (@Key, @Max);
COMMIT TRANSACTION;`

// LimitSet implements dialect.Operator (sqlbase, after refusing a key the
// column cannot hold).
func (d *SQLServer) LimitSet(ctx context.Context, key string, max int) error {
	if !strings.HasPrefix(key, dialect.LimitProcessPrefix) {
		if err := checkLen("limit key", key, limitKeyMax(key)); err != nil {
			return fmt.Errorf("set limit: %w", err)
		}
	}
	return d.Base.LimitSet(ctx, key, max)
}

// limitListSQL reads limits with their slots in use. In: key (empty for all). Out:
// key, max, updated_at, running.
const limitListSQL = `
SET NOCOUNT ON;
DECLARE @Key nvarchar(400) = @pKey;
SELECT l.[key], l.max_running, l.updated_at,
       CASE WHEN l.[key] LIKE N'kind:%'
            THEN (SELECT COUNT(*) FROM stageq.Tasks AS t WITH (INDEX(IX_Tasks_Running))
                   WHERE t.kind = SUBSTRING(l.[key], 6, 200) AND t.state = 'running')
            ELSE (SELECT COUNT(*) FROM stageq.Tasks AS t WITH (INDEX(IX_Tasks_RunningLimit))
                   WHERE t.limit_key = l.[key] AND t.state = 'running')
       END
  FROM stageq.Limits AS l
 WHERE @Key = N'' OR l.[key] = @Key
UNION ALL
SELECT CONCAT(N'process:', p.name), p.max_parallel, p.updated_at,
       (SELECT COUNT(*) FROM stageq.Tasks AS t WITH (INDEX(IX_Tasks_Running))
         WHERE t.process_id = p.id AND t.state = 'running')
  FROM stageq.Processes AS p
 WHERE p.max_parallel IS NOT NULL AND (@Key = N'' OR CONCAT(N'process:', p.name) = @Key)
 ORDER BY 1
OPTION (RECOMPILE);`

// limitDeleteSQL removes a limit. In: key. Out: rows removed.
const limitDeleteSQL = `
SET NOCOUNT ON;
DECLARE @Key nvarchar(205) = @pKey;
DELETE FROM stageq.Limits WHERE [key] = @Key;
SELECT @@ROWCOUNT;`

// LimitDelete implements dialect.Operator (sqlbase, after refusing a key the
// column cannot hold).
func (d *SQLServer) LimitDelete(ctx context.Context, key string) error {
	if !strings.HasPrefix(key, dialect.LimitProcessPrefix) {
		if err := checkLen("limit key", key, limitKeyMax(key)); err != nil {
			return fmt.Errorf("delete limit: %w", err)
		}
	}
	return d.Base.LimitDelete(ctx, key)
}
