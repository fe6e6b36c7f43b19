package sqlserver

import (
	"context"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// extendSQL pushes back, by @LeaseMs from the database's now, the lease of every
// task worker @WorkerId holds, and returns their ids. A task the worker believes
// it holds but that is missing here was rescued and must be abandoned. In: worker
// id, lease ms. Out: task ids.
//
// Locks: a clustered-key seek per listed task (FORCESEEK: the list is joined by
// id), exclusive on the rows the worker still holds. lease_expires_at is in no
// index, so nothing else is written. FinishMany and Rescue reach a running task
// by its clustered key too, so they queue behind this statement (or it behind
// them) on the one row instead of each holding half.
const extendSQL = `
SET NOCOUNT ON;
DECLARE @WorkerId nvarchar(200) = @pWorkerId,
        @LeaseMs int = @pLeaseMs,
        @Tasks nvarchar(max) = @pTasks;
UPDATE t
   SET lease_expires_at = DATEADD(millisecond, @LeaseMs, SYSUTCDATETIME())
OUTPUT inserted.id, inserted.lease_token
  FROM stageq.Tasks AS t WITH (ROWLOCK, FORCESEEK)
  JOIN OPENJSON(@Tasks) WITH (id bigint '$.id', token bigint '$.token') AS h
    ON h.id = t.id AND h.token = t.lease_token
 WHERE t.worker_id = @WorkerId AND t.state = 'running';`

// TaskExtendLeases implements dialect.Dialect. Idempotent, so retried.
func (d *SQLServer) TaskExtendLeases(ctx context.Context, ep dialect.ExtendParams) ([]dialect.TaskLease, error) {
	if err := checkLen("worker id", ep.WorkerID, maxName); err != nil {
		return nil, fmt.Errorf("extend leases: %w", err)
	}
	leaseMs := millis(ep.Lease)
	if leaseMs < 1 || leaseMs > 1<<31-1 {
		return nil, fmt.Errorf("extend leases: %w: lease must be between 1 ms and 24 days, got %s", dialect.ErrInvalid, ep.Lease)
	}
	list, err := dialect.LeasesJSON(ep.Tasks)
	if err != nil {
		return nil, err
	}
	held, err := queryAll(ctx, d, retryAll, extendSQL, dialect.ScanTaskLease,
		nvarchar("pWorkerId", ep.WorkerID),
		integer("pLeaseMs", int32(leaseMs)),
		nvarchar("pTasks", list))
	if err != nil {
		return nil, fmt.Errorf("extend leases: %w", err)
	}
	return held, nil
}

// rescueSQL calls Rescue (routines/sqlserver/70_Rescue.sql): up to @Max tasks whose lease expired go back to
// the queue, one short transaction per task, each such attempt logged abandoned
// and counted against the task's abandon budget, not its attempts (a task fails
// for good at its 10th abandon; migration 9); then
// up to @Max processes whose stage ended without being advanced (a worker died
// between a completion and its advance) are advanced. In: rows per pass
// (1..1000). Out: how many tasks it rescued.
const rescueSQL = `
SET NOCOUNT ON;
DECLARE @Max int = @pMax,
        @Rescued int = 0;
EXEC stageq_routines.Rescue @Max = @Max, @Rescued = @Rescued OUTPUT;
SELECT @Rescued;`

// TaskRescueExpired implements dialect.Dialect. Each task is re-checked under its
// locks, so running a pass again is harmless: retried.
func (d *SQLServer) TaskRescueExpired(ctx context.Context, rp dialect.RescueParams) (int, error) {
	n := rp.Max
	if n <= 0 {
		n = 100
	}
	rescued, err := d.queryCount(ctx, retryAll, d.calls.SQL(rescueSQL), integer("pMax", int32(min(n, 1000))))
	if err != nil {
		return 0, fmt.Errorf("rescue expired leases: %w", err)
	}
	return rescued, nil
}
