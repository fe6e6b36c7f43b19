package conformance

// The fail-fast deadline (queue/heartbeat.go): a worker whose heartbeats do not
// land cancels its running tasks before their leases can expire. A write lock
// its own atomic bodies hold (SQLite's one writer) stops every heartbeat and
// rescue alike, so there it must cost no attempt its lease.

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
	forEachDialectBut(t, "sqlserver", "the blocking transaction below is written for PostgreSQL and SQLite", func(t *testing.T, db *testDB) {
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
		release := blockHeartbeats(t, db)
		close(locked)
		r := <-done
		// The lease as the database has it, read before the lock goes: the last
		// extension that landed, even one sent just before the lock was taken.
		expires := leaseExpiry(t, db, id)
		release()
		if !r.ok {
			t.Fatalf("the task ran to its end (%s) though its lease expired at %s", r.cancelledAt.Format(time.StampMilli), expires.Format(time.StampMilli))
		}
		if !r.cancelledAt.Before(expires) {
			t.Errorf("the task was cancelled at %s, after its lease expired at %s",
				r.cancelledAt.Format(time.StampMilli), expires.Format(time.StampMilli))
		}
	})
}

// blockHeartbeats holds, in a transaction left open until release, the lock
// every heartbeat needs: SQLite's write lock, or the worker rows on
// PostgreSQL (a heartbeat updates its own).
func blockHeartbeats(t *testing.T, db *testDB) (release func()) {
	t.Helper()
	ctx := context.Background()
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
	return func() { tx.Rollback() }
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

// TestLongAtomicTaskStallsNoOne (issue 10, item 11): a long atomic SQL task
// runs beside short tasks with short leases. On SQLite its transaction holds
// the database's only write lock for the whole body, so no heartbeat,
// completion or rescue can write meanwhile; still no unrelated attempt may be
// abandoned or cancelled for it, and the atomic task runs once.
func TestLongAtomicTaskStallsNoOne(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		db.skipOnBabelfish(t, "no claim or rescue there (harness_test.go)")
		ctx := context.Background()
		db.exec(t, "CREATE TABLE conf_hold (n INT NOT NULL)")
		atomic := true
		long := db.enqueue(t, "long", 1, stages.Task{
			Body: "INSERT INTO conf_hold (n) VALUES (1); " + db.sleepSQL(3), Atomic: &atomic, MaxAttempts: 1})
		// And one whose body fails after holding the lock as long: its effect
		// is undone, and still nobody else's lease expires for it.
		db.enqueue(t, "longfail", 1, stages.Task{
			Body:   "INSERT INTO conf_hold (n) VALUES (2); " + db.sleepSQL(2) + "; SELECT * FROM conf_no_such_table",
			Atomic: &atomic, MaxAttempts: 1})
		const n = 30
		p := plan("short", "work", []int{1}, sameBody("x"), n)
		p.Defaults.MaxAttempts = 1
		db.submit(t, p)
		cfg := fastConfig()
		cfg.Concurrency = 3
		cfg.Lease = time.Second
		cfg.Heartbeat = 200 * time.Millisecond
		startWorkers(t, db, 2, cfg, func(w *queue.Worker) {
			w.Handle("work", func(ctx context.Context, _ *queue.Task) error {
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-time.After(150 * time.Millisecond):
					return nil
				}
			})
		})
		waitFor(t, 2*time.Minute, "every task to end", func() bool {
			tasks, err := db.D.TaskList(ctx, dialect.TaskFilter{})
			if err != nil || len(tasks) != 1 || tasks[0].State != dialect.StateFailed {
				return false
			}
			for _, e := range db.logs(t, dialect.LogFilter{}) {
				if e.Outcome == dialect.OutcomeRunning {
					return false
				}
			}
			return true
		})
		entries := db.logs(t, dialect.LogFilter{})
		for _, e := range entries {
			if e.Process == "longfail" {
				if e.Outcome != dialect.OutcomeFailed {
					t.Errorf("the failing atomic task's attempt %d ended %s, want failed", e.Attempt, e.Outcome)
				}
				continue
			}
			if e.Outcome != dialect.OutcomeSucceeded && !neverStarted(e) {
				t.Errorf("%s task %d attempt %d: %s %s", e.Process, e.TaskID, e.Attempt, e.Outcome, e.Error)
			}
		}
		if got := countOutcome(entries, dialect.OutcomeSucceeded); got != n+1 {
			t.Errorf("%d attempts succeeded, want %d", got, n+1)
		}
		if got := db.count(t, "SELECT count(*) FROM conf_hold WHERE n = 1"); got != 1 {
			t.Errorf("the atomic body's effect happened %d times, want 1", got)
		}
		if got := db.count(t, "SELECT count(*) FROM conf_hold WHERE n = 2"); got != 0 {
			t.Errorf("the failed atomic body's effect stayed (%d rows)", got)
		}
		if got := len(db.logs(t, dialect.LogFilter{TaskID: long})); got != 1 {
			t.Errorf("the atomic task ran %d times, want 1", got)
		}
	})
}
