package sqlite

import (
	"context"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// Fair share by virtual time, the algorithm of PostgreSQL's schema version 2
// (migrations/postgres/000002_hot_path.up.sql): a task that becomes available
// is stamped with a virtual start time, its process's previous one plus the
// stride 1,000,000 / weight, never earlier than the queue's current virtual
// time; the claim takes the lowest of the highest process priority. Every
// function here runs inside the caller's write transaction.
const (
	// headVTimeSQL is the current virtual time of the priority hp.priority
	// (the caller names its row hp): the next task a claim would take at that
	// priority, or the clock (the newest stamp) when none is available. Read
	// by vnowSQL, stampBaseSQL and the claim's due step (claimDueSQL).
	headVTimeSQL = `coalesce(
    (SELECT vtime FROM stageq_tasks INDEXED BY stageq_tasks_claim
      WHERE state = 'available' AND process_priority = hp.priority
      ORDER BY process_priority DESC, vtime, id LIMIT 1),
    (SELECT v FROM stageq_vclock))`
	// The current virtual time of priority ?1.
	vnowSQL = `SELECT ` + headVTimeSQL + ` FROM (SELECT ?1 AS priority) hp`
	// In: process. Out: the virtual time its next tasks are stamped from.
	stampBaseSQL = `SELECT max(` + headVTimeSQL + `, hp.vtail) FROM stageq_processes hp WHERE hp.id = ?`
	// In: process, the end of what was just stamped.
	stampDoneSQL  = `UPDATE stageq_processes SET vtail = max(vtail, ?2) WHERE id = ?1`
	stampClockSQL = `UPDATE stageq_vclock SET v = max(v, ?)`
)

// fairStride is a process's step in virtual time per task.
func fairStride(weight int64) int64 { return 1_000_000 / max(weight, 1) }

func stampBase(ctx context.Context, q dialect.Querier, processID int64) (int64, error) {
	var base int64
	if err := q.QueryRowContext(ctx, stampBaseSQL, processID).Scan(&base); err != nil {
		return 0, fmt.Errorf("virtual time of process %d: %w", processID, mapErr(err))
	}
	return base, nil
}

func stampDone(ctx context.Context, q dialect.Querier, processID, vtail int64) error {
	if _, err := q.ExecContext(ctx, stampDoneSQL, processID, vtail); err != nil {
		return fmt.Errorf("virtual time of process %d: %w", processID, mapErr(err))
	}
	if _, err := q.ExecContext(ctx, stampClockSQL, vtail); err != nil {
		return fmt.Errorf("virtual clock: %w", mapErr(err))
	}
	return nil
}

func vnow(ctx context.Context, q dialect.Querier, priority int64) (int64, error) {
	var v int64
	if err := q.QueryRowContext(ctx, vnowSQL, priority).Scan(&v); err != nil {
		return 0, fmt.Errorf("virtual time: %w", mapErr(err))
	}
	return v, nil
}
