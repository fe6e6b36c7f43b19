package conformance

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
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

// lateClaim is a real dialect whose first claim that leases a task answers
// late: the claim ran (its lease runs from then), but the worker hears of it
// only after heartbeats that could not extend a task they did not know of, as
// when the answer waits for the connection (SQLite prepares its first claim's
// statements on its one queue connection after the commit) or the claim loop
// is not scheduled. From then on no lease extension lands.
type lateClaim struct {
	dialect.Dialect
	delay time.Duration
	late  atomic.Bool
}

func (d *lateClaim) TaskClaim(ctx context.Context, cp dialect.ClaimParams) ([]dialect.ClaimedTask, error) {
	got, err := d.Dialect.TaskClaim(ctx, cp)
	if err == nil && len(got) > 0 && d.late.CompareAndSwap(false, true) {
		time.Sleep(d.delay)
	}
	return got, err
}

func (d *lateClaim) TaskExtendLeases(ctx context.Context, ep dialect.ExtendParams) ([]dialect.TaskLease, error) {
	if d.late.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return d.Dialect.TaskExtendLeases(ctx, ep)
}

// TestFailFastCoversLateClaims: the fail-fast deadline also covers the lease
// of a task whose claim answered after later heartbeats had landed (which
// extended nothing of it): with no extension landing after it, the task is
// cancelled before the lease its claim took expires, not a lease after the
// last of those heartbeats, when another worker may be running it already.
func TestFailFastCoversLateClaims(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		id := db.enqueue(t, "late", 1, stages.Task{Kind: "hold", Body: "x", MaxAttempts: 5})
		late := &lateClaim{Dialect: db.D, delay: time.Second}
		c, err := queue.New(ctx, late, queue.Config{})
		if err != nil {
			t.Fatal(err)
		}
		ldb := *db
		ldb.Client = c
		type result struct {
			at        time.Time
			cancelled bool
		}
		started, done := make(chan struct{}, 1), make(chan result, 1)
		cfg := fastConfig() // 2 s leases, beats every 300 ms: the deadline is 1.85 s after a lease starts
		cfg.NoScheduler = true
		cfg.Retention.Off = true
		startWorkers(t, &ldb, 1, cfg, func(w *queue.Worker) {
			w.Handle("hold", func(ctx context.Context, _ *queue.Task) error {
				select {
				case started <- struct{}{}:
				default: // a later attempt: the first one's result is in done
				}
				r := result{cancelled: true}
				select {
				case <-ctx.Done():
				case <-time.After(4 * time.Second):
					r.cancelled = false
				}
				r.at = time.Now()
				select {
				case done <- r:
				default:
				}
				return ctx.Err()
			})
		})
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the task never started")
		}
		// No extension lands after the claim: this is the lease it took.
		expires := leaseExpiry(t, db, id)
		r := <-done
		if !r.cancelled {
			t.Fatalf("the task ran to its end (%s) though its lease expired at %s", r.at.Format(time.StampMilli), expires.Format(time.StampMilli))
		}
		if !r.at.Before(expires) {
			t.Errorf("the task was cancelled at %s, after its lease expired at %s: another worker may have been running it",
				r.at.Format(time.StampMilli), expires.Format(time.StampMilli))
		}
	})
}
