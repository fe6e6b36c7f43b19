package conformance

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// TestFailFastWhileHeartbeatBlocks (issue 10, item 9): while the database makes
// the heartbeat wait (another transaction holds the lock it needs), the worker
// still cancels its running task before the task's lease expires, rather than
// run it on beside the holder the database may hand it to next.
func TestFailFastWhileHeartbeatBlocks(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		db.skipDialect(t, "sqlserver", "the blocking transaction below is written for PostgreSQL and SQLite")
		ctx := context.Background()
		started := make(chan struct{}, 1)
		type result struct {
			cancelledAt time.Time
			ok          bool // cancelled (not run to its end)
		}
		done := make(chan result, 1)
		locked := make(chan struct{}) // closed once the heartbeat is blocked
		cfg := fastConfig()
		cfg.Lease, cfg.Heartbeat = 1500*time.Millisecond, 500*time.Millisecond
		cfg.NoScheduler = true
		cfg.Retention.Off = true
		startWorkers(t, db, 1, cfg, func(w *queue.Worker) {
			w.Handle("hold", func(ctx context.Context, task *queue.Task) error {
				started <- struct{}{}
				// "Ran to its end" counts from the moment the heartbeat is
				// blocked, not from the start: a slow machine may take a while
				// to block it, and the beats that land before then extend
				// the lease.
				lk, end := locked, (<-chan time.Time)(nil)
				for {
					select {
					case <-ctx.Done():
						done <- result{time.Now(), true}
						return ctx.Err()
					case <-lk:
						lk, end = nil, time.After(2500*time.Millisecond)
					case <-end:
						done <- result{time.Now(), false}
						return nil
					}
				}
			})
		})
		id := db.enqueue(t, "ff", 1, stages.Task{Kind: "hold", Body: "x", MaxAttempts: 5})
		<-started
		// Block the heartbeat: SQLite's write lock, or the worker rows on
		// PostgreSQL (the heartbeat updates its own).
		tx, err := db.D.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if db.Dialect == "postgres" {
			if _, err := tx.ExecContext(ctx, `SELECT 1 FROM stageq.workers FOR UPDATE`); err != nil {
				t.Fatal(err)
			}
		} else if _, err := tx.ExecContext(ctx, `UPDATE stageq_limits SET max_running = max_running WHERE 0`); err != nil {
			t.Fatal(err) // BEGIN IMMEDIATE already holds the write lock; this only uses the transaction
		}
		close(locked)
		r := <-done
		// The lease as the database has it, read before the lock goes: the last
		// extension that landed, even one sent just before the lock was taken.
		expires := leaseExpiry(t, db, id)
		tx.Rollback()
		if !r.ok {
			t.Fatalf("the task ran to its end (%s) though its lease expired at %s", r.cancelledAt.Format(time.StampMilli), expires.Format(time.StampMilli))
		}
		if !r.cancelledAt.Before(expires) {
			t.Errorf("the task was cancelled at %s, after its lease expired at %s",
				r.cancelledAt.Format(time.StampMilli), expires.Format(time.StampMilli))
		}
	})
}

// leaseExpiry reads a running task's lease expiry (readers are not blocked by
// the test's writer: WAL on SQLite, MVCC on PostgreSQL).
func leaseExpiry(t *testing.T, db *testDB, id int64) time.Time {
	t.Helper()
	var at time.Time
	q := schedSQL(db, `SELECT lease_expires_at FROM stageq.tasks WHERE id = $1`)
	if db.Dialect == "sqlite" {
		var s sql.NullString
		if err := db.D.DB().QueryRowContext(context.Background(), q, id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		var err error
		if at, err = time.Parse("2006-01-02 15:04:05.000", s.String); err != nil {
			t.Fatal(err)
		}
		return at
	}
	if err := db.D.DB().QueryRowContext(context.Background(), q, id).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}
