package sqlserver

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// claimSQL leases up to @Max tasks to worker @WorkerId with lease token @Token
// for @LeaseMs milliseconds and writes the start of their Logs rows, in one
// transaction, through Claim (routines/sqlserver/40_Claim.sql; the design: migrations/sqlserver/000002_hot_path.up.sql):
// fair across processes (priority, then the virtual times stamped on the tasks),
// within the concurrency limits, and passing over every row another session
// holds. Without limits it locks no shared row: one UPDLOCK, READPAST UPDATE per
// priority level. Only the kinds the worker runs are leased (migration 7). In:
// max, worker id, token, lease ms, kinds (a JSON array; empty for every kind). Out:
// the claimed tasks, each with its abandons (attempts lost to infrastructure,
// not counted against max_attempts; migration 9).
//
// The batch sets READ COMMITTED (reverted when the batch ends): READPAST is only
// legal at READ COMMITTED or REPEATABLE READ, and a caller's session might run at
// another level.
const claimSQL = `
SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @Max int = @pMax,
        @WorkerId nvarchar(200) = @pWorkerId,
        @Token bigint = @pToken,
        @LeaseMs int = @pLeaseMs,
        @Kinds nvarchar(max) = @pKinds;
IF @Kinds = N'' SET @Kinds = NULL;
EXEC stageq_routines.Claim @Max = @Max, @WorkerId = @WorkerId, @Token = @Token, @LeaseMs = @LeaseMs, @Kinds = @Kinds;`

// maxClaim bounds one claim. A claimed task costs about four row locks in the
// claim's UPDATE (its clustered row and three index keys) and four in the Logs
// INSERT: 500 keep each statement near 2,000 locks, far below the 5,000 locks on
// one object at which SQL Server attempts lock escalation.
const maxClaim = 500

// TaskClaim implements dialect.Dialect. A claim that failed on a deadlock or a
// broken connection is retried: if its commit happened before the connection
// broke, those tasks are rescued when their lease expires (at-least-once).
func (d *SQLServer) TaskClaim(ctx context.Context, cp dialect.ClaimParams) ([]dialect.ClaimedTask, error) {
	if cp.Max <= 0 {
		return nil, nil
	}
	if err := checkLen("worker id", cp.WorkerID, maxName); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	leaseMs := millis(cp.Lease)
	if leaseMs < 1 || leaseMs > 1<<31-1 {
		return nil, fmt.Errorf("claim: %w: lease must be between 1 ms and 24 days, got %s", dialect.ErrInvalid, cp.Lease)
	}
	out, err := queryAll(ctx, d, retryAll, d.calls.SQL(claimSQL), func(r *sql.Rows, t *dialect.ClaimedTask) error {
		t.Token = cp.Token
		return r.Scan(&t.ID, &t.ProcessID, &t.Process, &t.Order, &t.Kind, &t.Body,
			&t.Attempt, &t.MaxAttempts, &t.Atomic, &t.Abandons)
	},
		integer("pMax", int32(min(cp.Max, maxClaim))),
		nvarchar("pWorkerId", cp.WorkerID),
		bigint("pToken", cp.Token),
		integer("pLeaseMs", int32(leaseMs)),
		nvarchar("pKinds", kindsParam(cp.Kinds)))
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return out, nil
}

// kindsParam is a kinds list as the statements take it: a JSON array, or the empty string
// (the batch turns it into NULL) for every kind.
func kindsParam(kinds []string) string {
	if j, ok := dialect.KindsJSON(kinds).(string); ok {
		return j
	}
	return ""
}
