package sqlite

import (
	"context"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

const workerRegisterSQL = `
INSERT INTO stageq_workers (id, hostname, pid, concurrency, version, kinds) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE
   SET hostname = excluded.hostname, pid = excluded.pid, version = excluded.version,
       started_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), heartbeat_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
       stopped_at = NULL, concurrency = excluded.concurrency, kinds = excluded.kinds`

// WorkerRegister implements dialect.Dialect.
func (s *SQLite) WorkerRegister(ctx context.Context, w dialect.WorkerInfo) error {
	if _, err := s.pool().ExecContext(ctx, workerRegisterSQL, w.ID, w.Hostname, w.PID, w.Concurrency, w.Version, dialect.KindsJSON(w.Kinds)); err != nil {
		return fmt.Errorf("register worker: %w", mapErr(err))
	}
	return nil
}

const workerHeartbeatSQL = `UPDATE stageq_workers SET heartbeat_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE id = ?`

// WorkerHeartbeat implements dialect.Dialect.
func (s *SQLite) WorkerHeartbeat(ctx context.Context, id string) error {
	if _, err := s.pool().ExecContext(ctx, workerHeartbeatSQL, id); err != nil {
		return fmt.Errorf("worker heartbeat: %w", mapErr(err))
	}
	return nil
}

const workerStopSQL = `
UPDATE stageq_workers
   SET stopped_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), heartbeat_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
 WHERE id = ?`

// WorkerStop implements dialect.Dialect.
func (s *SQLite) WorkerStop(ctx context.Context, id string) error {
	if _, err := s.pool().ExecContext(ctx, workerStopSQL, id); err != nil {
		return fmt.Errorf("stop worker: %w", mapErr(err))
	}
	return nil
}
