package postgres

import (
	"context"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

const workerRegisterSQL = `
INSERT INTO stageq.workers (id, hostname, pid, concurrency, version, kinds, routines)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (id) DO UPDATE
   SET hostname = EXCLUDED.hostname, pid = EXCLUDED.pid, version = EXCLUDED.version, started_at = now(),
       heartbeat_at = now(), stopped_at = NULL, concurrency = EXCLUDED.concurrency, kinds = EXCLUDED.kinds,
       routines = EXCLUDED.routines`

// WorkerRegister implements dialect.Dialect. The row records the routine
// version the worker calls, which `queuectl migrate prune-routines` keeps. A
// worker started again under its id (a service's restart) takes the row over
// as new: its host, pid, version and start.
func (p *Postgres) WorkerRegister(ctx context.Context, w dialect.WorkerInfo) error {
	if _, err := p.db.ExecContext(ctx, workerRegisterSQL, w.ID, w.Hostname, w.PID, w.Concurrency, w.Version, dialect.KindsJSON(w.Kinds), p.calls.Routines().Version); err != nil {
		return fmt.Errorf("register worker: %w", mapErr(err))
	}
	return nil
}

const workerHeartbeatSQL = `UPDATE stageq.workers SET heartbeat_at = now() WHERE id = $1`

// WorkerHeartbeat implements dialect.Dialect.
func (p *Postgres) WorkerHeartbeat(ctx context.Context, id string) error {
	if _, err := p.db.ExecContext(ctx, workerHeartbeatSQL, id); err != nil {
		return fmt.Errorf("worker heartbeat: %w", mapErr(err))
	}
	return nil
}

const workerStopSQL = `UPDATE stageq.workers SET stopped_at = now(), heartbeat_at = now() WHERE id = $1`

// WorkerStop implements dialect.Dialect.
func (p *Postgres) WorkerStop(ctx context.Context, id string) error {
	if _, err := p.db.ExecContext(ctx, workerStopSQL, id); err != nil {
		return fmt.Errorf("stop worker: %w", mapErr(err))
	}
	return nil
}
