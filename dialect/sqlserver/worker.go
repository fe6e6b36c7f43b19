package sqlserver

import (
	"context"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// workerRegisterSQL inserts a worker's row or takes it over as new (same id: a
// restart).
// In: id, hostname, pid, concurrency, version, kinds (a JSON array; empty:
// not recorded, every kind), the routine version the worker calls. Out: nothing.
//
// The upsert takes UPDLOCK + SERIALIZABLE on the key, so two registrations of one
// id queue up instead of both inserting (the pattern the docs give for "update
// or insert" without MERGE).
const workerRegisterSQL = `
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @Id nvarchar(200) = @pId,
        @Hostname nvarchar(256) = @pHostname,
        @OsPid int = @pPid,
        @Concurrency int = @pConcurrency,
        @Version nvarchar(200) = @pVersion,
        @Kinds nvarchar(max) = @pKinds,
        @Routines int = @pRoutines;
IF @Kinds = N'' SET @Kinds = NULL;
BEGIN TRANSACTION;
UPDATE w
   SET hostname = @Hostname, pid = @OsPid, version = @Version, started_at = SYSUTCDATETIME(),
       heartbeat_at = SYSUTCDATETIME(), stopped_at = NULL, concurrency = @Concurrency, kinds = @Kinds,
       routines = @Routines
  FROM stageq.Workers AS w WITH (UPDLOCK, SERIALIZABLE, ROWLOCK)
 WHERE w.id = @Id;
IF @@ROWCOUNT = 0
    INSERT INTO stageq.Workers (id, hostname, pid, concurrency, version, kinds, routines)
    VALUES (@Id, @Hostname, @OsPid, @Concurrency, @Version, @Kinds, @Routines);
COMMIT TRANSACTION;`

// WorkerRegister implements dialect.Dialect.
func (d *SQLServer) WorkerRegister(ctx context.Context, w dialect.WorkerInfo) error {
	for _, c := range []struct {
		field, v string
		n        int
	}{{"worker id", w.ID, maxName}, {"hostname", w.Hostname, maxHost}, {"version", w.Version, maxName}} {
		if err := checkLen(c.field, c.v, c.n); err != nil {
			return fmt.Errorf("register worker: %w", err)
		}
	}
	err := d.exec(ctx, retryAll, workerRegisterSQL,
		nvarchar("pId", w.ID),
		nvarchar("pHostname", w.Hostname),
		integer("pPid", clampInt32(int64(w.PID))),
		integer("pConcurrency", clampInt32(int64(w.Concurrency))),
		nvarchar("pVersion", w.Version),
		nvarchar("pKinds", kindsParam(w.Kinds)),
		integer("pRoutines", int32(d.calls.Routines().Version)))
	if err != nil {
		return fmt.Errorf("register worker: %w", err)
	}
	return nil
}

// workerHeartbeatSQL records that a worker is alive. In: id. A seek on PK_Workers.
const workerHeartbeatSQL = `
SET NOCOUNT ON;
DECLARE @Id nvarchar(200) = @pId;
UPDATE stageq.Workers SET heartbeat_at = SYSUTCDATETIME() WHERE id = @Id;`

// WorkerHeartbeat implements dialect.Dialect.
func (d *SQLServer) WorkerHeartbeat(ctx context.Context, id string) error {
	return d.updateWorker(ctx, "worker heartbeat", id, workerHeartbeatSQL, nvarchar("pId", id))
}

// workerStopSQL marks a worker stopped (graceful shutdown). In: id.
const workerStopSQL = `
SET NOCOUNT ON;
DECLARE @Id nvarchar(200) = @pId;
UPDATE stageq.Workers SET stopped_at = SYSUTCDATETIME(), heartbeat_at = SYSUTCDATETIME() WHERE id = @Id;`

// WorkerStop implements dialect.Dialect.
func (d *SQLServer) WorkerStop(ctx context.Context, id string) error {
	return d.updateWorker(ctx, "stop worker", id, workerStopSQL, nvarchar("pId", id))
}

// updateWorker sends stmt, which sets the times of worker id's row, on the pool
// with retryAll: setting them again only moves them to the later now. what
// names the command in errors.
func (d *SQLServer) updateWorker(ctx context.Context, what, id, stmt string, args ...any) error {
	if err := checkLen("worker id", id, maxName); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := d.exec(ctx, retryAll, stmt, args...); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
