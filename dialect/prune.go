package dialect

import (
	"context"
	"encoding/json"
	"time"
)

// Pruner deletes what retention no longer keeps. Every worker runs it, with no
// leader: each statement deletes at most Batch rows that no other transaction
// holds (SKIP LOCKED where the database has it), so racing workers share the work
// and none waits on another, and a batch stays far below SQL Server's
// lock-escalation threshold (5,000 locks).
type Pruner interface {
	// PruneLogs deletes up to p.Batch Logs rows of attempts that started before
	// the database's now minus p.Age (running attempts are never deleted).
	PruneLogs(ctx context.Context, p PruneParams) (int, error)
	// PruneWorkers deletes up to p.Batch Workers rows whose last heartbeat (or
	// stop) is older than p.Age and that hold no running task.
	PruneWorkers(ctx context.Context, p PruneParams) (int, error)
	// PruneProcesses deletes up to p.Batch processes that finished (succeeded or
	// cancelled) longer than p.Age ago and have no task left; never "default".
	PruneProcesses(ctx context.Context, p PruneParams) (int, error)
	// PruneRecord stores the outcome of a pass, for `queuectl status`.
	PruneRecord(ctx context.Context, s PruneStatus) error
	// PruneLast reads the latest pass; ok is false before the first.
	PruneLast(ctx context.Context) (s PruneStatus, ok bool, err error)
}

// PruneParams bounds one prune statement.
type PruneParams struct {
	Age   time.Duration
	Batch int
}

// PruneStatus is one prune pass: who ran it, when, what it deleted, and the
// retention it applied (zero: that kind of row is kept for ever).
type PruneStatus struct {
	WorkerID         string        `json:"worker_id"`
	RanAt            time.Time     `json:"ran_at,omitzero"`
	LogsDeleted      int64         `json:"logs_deleted"`
	WorkersDeleted   int64         `json:"workers_deleted"`
	ProcessesDeleted int64         `json:"processes_deleted"`
	RetainLogs       time.Duration `json:"-"`
	RetainWorkers    time.Duration `json:"-"`
	RetainProcesses  time.Duration `json:"-"`
}

// MarshalJSON writes the retention in seconds, like every stageq JSON output.
func (s PruneStatus) MarshalJSON() ([]byte, error) {
	type plain PruneStatus
	return json.Marshal(struct {
		plain
		RetainLogsSeconds      float64 `json:"retain_logs_seconds"`
		RetainWorkersSeconds   float64 `json:"retain_workers_seconds"`
		RetainProcessesSeconds float64 `json:"retain_processes_seconds"`
	}{plain(s), s.RetainLogs.Seconds(), s.RetainWorkers.Seconds(), s.RetainProcesses.Seconds()})
}
