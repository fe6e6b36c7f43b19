package sqlite

import (
	"context"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// extendSQL pushes back the leases of the attempts a worker names and returns
// those it still holds. In: lease offset, worker, then the attempts as
// leasePairs encodes them (pairs.go).
const extendSQL = `
UPDATE stageq_tasks SET lease_expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?1)
 WHERE id IN (SELECT value FROM json_each(?3))
   AND id || ':' || lease_token IN (SELECT value FROM json_each(?4))
   AND worker_id = ?2 AND state = 'running'
RETURNING id, lease_token`

// TaskExtendLeases implements dialect.Dialect.
func (s *SQLite) TaskExtendLeases(ctx context.Context, ep dialect.ExtendParams) ([]dialect.TaskLease, error) {
	ids, attempts := leasePairs(ep.Tasks)
	held, err := dialect.QueryAll(ctx, s.pool(), mapErr, extendSQL, dialect.ScanTaskLease, offset(ep.Lease), ep.WorkerID, ids, attempts)
	if err != nil {
		return nil, fmt.Errorf("extend leases: %w", err)
	}
	return held, nil
}

const (
	// maxAbandonsSQL is how many abandoned attempts (lost to a dead worker or
	// connection) a task may have before it fails for good; they do not count
	// against its max_attempts (migration 000005).
	maxAbandonsSQL = "10"
	// abandonErrorSQL is the error recorded for an abandoned attempt, from the
	// cause ?1 and the task's abandons before it.
	abandonErrorSQL = `CASE WHEN abandons + 1 >= ` + maxAbandonsSQL + `
      THEN coalesce(nullif(?1, ''), 'abandoned') || '; abandoned ' || (abandons + 1)
           || ' times (its worker died or lost its database connection each time): failed for good'
      ELSE coalesce(nullif(?1, ''), 'abandoned') || ' (abandoned ' || (abandons + 1) || ' of ' || ` + maxAbandonsSQL + `
           || ' times; not counted against max_attempts)' END`
)

const (
	// In: limit. Out: expired leases, oldest first (a seek on stageq_tasks_lease),
	// and whether the task's process is still there.
	rescueFindSQL = `
SELECT t.id, t.process_id, t.lease_token, t.worker_id,
       EXISTS (SELECT 1 FROM stageq_processes p WHERE p.id = t.process_id)
  FROM stageq_tasks t
 WHERE t.state = 'running' AND t.lease_expires_at < strftime('%Y-%m-%d %H:%M:%f', 'now')
 ORDER BY t.lease_expires_at
 LIMIT ?`
	// A task whose process is gone (deleted by hand with foreign keys off, as
	// the sqlite3 shell has them) can never run or advance: it is removed, as
	// PostgreSQL's rescue removes one. In: id, token.
	rescueOrphanSQL = `DELETE FROM stageq_tasks WHERE id = ?1 AND lease_token = ?2 AND state = 'running'`
	// An expired lease counts against the task's abandon budget, not its
	// attempts: a task out of that budget fails for good; otherwise it runs
	// again now. In: error, id, token. Out: the error recorded.
	rescueTaskSQL = `
UPDATE stageq_tasks
   SET state = CASE WHEN abandons + 1 >= ` + maxAbandonsSQL + ` THEN 'failed'
                    WHEN execution_order = (SELECT current_order FROM stageq_processes p
                                             WHERE p.id = stageq_tasks.process_id AND p.paused = 0)
                    THEN 'available' ELSE 'blocked' END,
       abandons = abandons + 1,
       run_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), last_error = ` + abandonErrorSQL + `,
       worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = ?2 AND lease_token = ?3 AND state = 'running'
RETURNING last_error`
	// In: error, id, token. INDEXED BY and +?: as finishLogSQL.
	rescueLogSQL = `
UPDATE stageq_logs INDEXED BY stageq_logs_task
   SET ended_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
       duration_ms = CAST(round((julianday('now') - julianday(started_at)) * 86400000) AS INTEGER),
       outcome = 'abandoned', error = ?
 WHERE task_id = +? AND lease_token = +?`
)

// TaskRescueExpired implements dialect.Dialect.
func (s *SQLite) TaskRescueExpired(ctx context.Context, rp dialect.RescueParams) (int, error) {
	n := 0
	err := s.inTx(ctx, nil, func(q dialect.Querier) error {
		type expired struct {
			id, process, token int64
			worker             string
			hasProcess         bool
		}
		rows, err := q.QueryContext(ctx, rescueFindSQL, rp.Max)
		if err != nil {
			return mapErr(err)
		}
		var found []expired
		for rows.Next() {
			var e expired
			if err := rows.Scan(&e.id, &e.process, &e.token, &e.worker, &e.hasProcess); err != nil {
				rows.Close()
				return err
			}
			found = append(found, e)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		for _, e := range found {
			msg := "lease expired: worker " + e.worker + " stopped extending it"
			if e.hasProcess {
				if err := q.QueryRowContext(ctx, rescueTaskSQL, msg, e.id, e.token).Scan(&msg); err != nil {
					return mapErr(err)
				}
			} else {
				// No other writer since the find (one transaction, SQLite's
				// one writer): the row is there to delete.
				msg += fmt.Sprintf("; its process (id %d) no longer exists: task removed", e.process)
				if _, err := q.ExecContext(ctx, rescueOrphanSQL, e.id, e.token); err != nil {
					return mapErr(err)
				}
			}
			if _, err := q.ExecContext(ctx, rescueLogSQL, msg, e.id, e.token); err != nil {
				return mapErr(err)
			}
			if e.hasProcess {
				if err := openStage(ctx, q, e.process); err != nil {
					return err
				}
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("rescue expired leases: %w", err)
	}
	return n, nil
}
