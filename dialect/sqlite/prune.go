package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stageq/stageq/dialect"
)

var _ dialect.Pruner = (*SQLite)(nil)

// Retention statements. In: the cut-off time (UTC text, from the database's
// clock), batch size. Each deletes one batch in its own short write transaction.
const (
	pruneCutoffSQL = `SELECT strftime('%Y-%m-%d %H:%M:%f', 'now', ?)`
	pruneLogsSQL   = `
DELETE FROM stageq_logs WHERE id IN (
    SELECT id FROM stageq_logs WHERE started_at < ?1 AND outcome <> 'running' ORDER BY started_at LIMIT ?2)`
	pruneWorkersSQL = `
DELETE FROM stageq_workers WHERE id IN (
    SELECT w.id FROM stageq_workers w
     WHERE coalesce(w.stopped_at, w.heartbeat_at) < ?1
       AND NOT EXISTS (SELECT 1 FROM stageq_tasks t WHERE t.worker_id = w.id AND t.state = 'running')
     LIMIT ?2)`
	pruneProcessesSQL = `
DELETE FROM stageq_processes WHERE id IN (
    SELECT p.id FROM stageq_processes p
     WHERE p.finished_at < ?1 AND p.state IN ('succeeded', 'cancelled') AND p.name <> 'default'
       AND NOT EXISTS (SELECT 1 FROM stageq_tasks t WHERE t.process_id = p.id)
     ORDER BY p.finished_at LIMIT ?2)`
	pruneRecordSQL = `
INSERT INTO stageq_prune_status (id, worker_id, ran_at, logs_deleted, workers_deleted, processes_deleted,
                                 retain_logs_s, retain_workers_s, retain_processes_s)
VALUES (1, ?1, strftime('%Y-%m-%d %H:%M:%f', 'now'), ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (id) DO UPDATE SET worker_id = excluded.worker_id, ran_at = excluded.ran_at,
    logs_deleted = excluded.logs_deleted, workers_deleted = excluded.workers_deleted,
    processes_deleted = excluded.processes_deleted, retain_logs_s = excluded.retain_logs_s,
    retain_workers_s = excluded.retain_workers_s, retain_processes_s = excluded.retain_processes_s`
	pruneLastSQL = `
SELECT worker_id, ran_at, logs_deleted, workers_deleted, processes_deleted,
       retain_logs_s, retain_workers_s, retain_processes_s
  FROM stageq_prune_status WHERE id = 1`
)

func (s *SQLite) prune(ctx context.Context, stmt, what string, p dialect.PruneParams) (int, error) {
	var cutoff string
	mod := fmt.Sprintf("-%.3f seconds", p.Age.Seconds())
	if err := s.pool().QueryRowContext(ctx, pruneCutoffSQL, mod).Scan(&cutoff); err != nil {
		return 0, fmt.Errorf("prune %s: %w", what, mapErr(err))
	}
	res, err := s.pool().ExecContext(ctx, stmt, cutoff, p.Batch)
	if err != nil {
		return 0, fmt.Errorf("prune %s: %w", what, mapErr(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("prune %s: %w", what, err)
	}
	return int(n), nil
}

// PruneLogs implements dialect.Pruner.
func (s *SQLite) PruneLogs(ctx context.Context, p dialect.PruneParams) (int, error) {
	return s.prune(ctx, pruneLogsSQL, "logs", p)
}

// PruneWorkers implements dialect.Pruner.
func (s *SQLite) PruneWorkers(ctx context.Context, p dialect.PruneParams) (int, error) {
	return s.prune(ctx, pruneWorkersSQL, "workers", p)
}

// PruneProcesses implements dialect.Pruner.
func (s *SQLite) PruneProcesses(ctx context.Context, p dialect.PruneParams) (int, error) {
	return s.prune(ctx, pruneProcessesSQL, "processes", p)
}

// PruneRecord implements dialect.Pruner.
func (s *SQLite) PruneRecord(ctx context.Context, st dialect.PruneStatus) error {
	_, err := s.pool().ExecContext(ctx, pruneRecordSQL, st.WorkerID, st.LogsDeleted, st.WorkersDeleted, st.ProcessesDeleted,
		int64(st.RetainLogs/time.Second), int64(st.RetainWorkers/time.Second), int64(st.RetainProcesses/time.Second))
	if err != nil {
		return fmt.Errorf("record prune pass: %w", mapErr(err))
	}
	return nil
}

// PruneLast implements dialect.Pruner.
func (s *SQLite) PruneLast(ctx context.Context) (dialect.PruneStatus, bool, error) {
	var st dialect.PruneStatus
	var ran string
	var rl, rw, rp int64
	err := s.pool().QueryRowContext(ctx, pruneLastSQL).Scan(&st.WorkerID, &ran, &st.LogsDeleted, &st.WorkersDeleted,
		&st.ProcessesDeleted, &rl, &rw, &rp)
	if errors.Is(err, sql.ErrNoRows) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("read prune status: %w", mapErr(err))
	}
	if st.RanAt, err = parseTime(ran); err != nil {
		return st, false, fmt.Errorf("read prune status: %w", err)
	}
	st.RetainLogs, st.RetainWorkers, st.RetainProcesses = time.Duration(rl)*time.Second, time.Duration(rw)*time.Second, time.Duration(rp)*time.Second
	return st, true, nil
}
