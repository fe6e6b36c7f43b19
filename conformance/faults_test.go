package conformance

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
)

// Issue 10, item 14: attempts lost to infrastructure are not the task's. Every
// task here has max_attempts 1, so a single attempt charged for a fault fails
// it for good; the faults are real: worker processes SIGKILLed and replaced,
// and (PostgreSQL) every worker connection terminated by the server again and
// again while bodies run. Every task must end succeeded, none failed.

// TestKilledWorkersChargeNothing: worker processes are SIGKILLed mid-run and
// replaced. Each victim is a worker seen running a task (an open Logs row of
// its id) at the moment of the kill, so every kill hits a body in flight
// however slowly the workers start on a loaded machine.
func TestKilledWorkersChargeNothing(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		db.skipOnBabelfish(t, "no claim or rescue there (harness_test.go)")
		const n, wantKills = 48, 4
		p := plan("killed", "", []int{1, 2}, sameBody(db.sleepSQL(0.5)), n/2)
		p.Defaults.MaxAttempts = 1
		db.submit(t, p)
		spawned := 0
		spawn := func() (*workerProcess, string) {
			spawned++
			id := fmt.Sprintf("killed-%d", spawned)
			return spawnWorker(t, db, "--id", id, "--concurrency", "3", "--lease", "1500ms", "--heartbeat", "300ms",
				"--poll-max", "50ms", "--retry-base", "50ms", "--retry-max", "200ms"), id
		}
		type victim struct {
			proc *workerProcess
			id   string
		}
		workers := make([]victim, 3)
		for i := range workers {
			proc, id := spawn()
			workers[i] = victim{proc, id}
		}
		running := func(id string) bool {
			for _, e := range db.logs(t, dialect.LogFilter{Process: "killed", WorkerID: id}) {
				if e.EndedAt == nil {
					return true
				}
			}
			return false
		}
		kills := 0
		deadline := time.Now().Add(3 * time.Minute)
		for time.Now().Before(deadline) {
			if len(db.logs(t, dialect.LogFilter{Process: "killed", Outcome: dialect.OutcomeSucceeded})) >= n {
				break
			}
			if kills < wantKills {
				i := rand.IntN(len(workers))
				if !running(workers[i].id) {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				workers[i].proc.kill()
				kills++
				proc, id := spawn()
				workers[i] = victim{proc, id}
				time.Sleep(time.Duration(300+rand.IntN(400)) * time.Millisecond)
				continue
			}
			time.Sleep(200 * time.Millisecond)
		}
		entries := db.logs(t, dialect.LogFilter{Process: "killed"})
		checkNoneCharged(t, db, "killed", entries, n)
		abandoned := countOutcome(entries, dialect.OutcomeAbandoned)
		t.Logf("%d kills; %d attempts, %d abandoned", kills, len(entries), abandoned)
		if kills == 0 || abandoned == 0 {
			t.Errorf("%d kills, %d attempts abandoned: the kills did not hit running tasks", kills, abandoned)
		}
		if t.Failed() {
			for _, e := range entries {
				t.Logf("task %d attempt %d by %s: %s %s", e.TaskID, e.Attempt, e.WorkerID, e.Outcome, e.Error)
			}
		}
	})
}

// TestTerminatedConnectionsChargeNothing (PostgreSQL): the server terminates
// every connection of the workers (pg_terminate_backend), idle and running
// bodies alike, every few hundred milliseconds. A body given a connection the
// server had closed starts on another; a body whose connection is cut is
// abandoned, not charged.
func TestTerminatedConnectionsChargeNothing(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t, newPostgresDB(t))
	admin := adminPool(t, db)

	const n = 60
	p := plan("cut", "", []int{1, 2, 3}, sameBody(db.sleepSQL(0.3)), n/3)
	p.Defaults.MaxAttempts = 1
	db.submit(t, p)
	args := []string{"--concurrency", "4", "--lease", "3s", "--heartbeat", "500ms", "--poll-max", "50ms",
		"--retry-base", "50ms", "--retry-max", "200ms"}
	spawnWorker(t, db, args...)
	spawnWorker(t, db, args...)
	succeeded := func() int {
		var c int
		if err := admin.QueryRowContext(ctx, "SELECT count(*) FROM stageq.logs WHERE outcome = 'succeeded'").Scan(&c); err != nil {
			t.Logf("count: %v", err)
		}
		return c
	}
	cuts, terminated := 0, 0
	deadline := time.Now().Add(3 * time.Minute)
	for succeeded() < n && time.Now().Before(deadline) {
		time.Sleep(time.Duration(300+rand.IntN(400)) * time.Millisecond)
		// Eight cuts: every cut abandons the bodies running then, and an
		// abandoned task goes straight back to the head of the queue, so one
		// task can be hit by every cut; the abandon budget (10) must outlast
		// them for "nothing charged" to be the property under test. (Twelve
		// cuts could abandon a task ten times and fail it, by design.)
		if cuts >= 8 {
			continue
		}
		var k int
		err := admin.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name <> 'stageq-test-admin'
   AND backend_type = 'client backend'`).Scan(&k)
		if err != nil {
			t.Fatalf("terminate: %v", err)
		}
		cuts++
		terminated += k
	}
	if got := succeeded(); got != n {
		t.Fatalf("%d of %d tasks succeeded", got, n)
	}
	var failed, abandoned, tasksLeft int
	if err := admin.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE outcome = 'failed'), count(*) FILTER (WHERE outcome = 'abandoned'),
 (SELECT count(*) FROM stageq.tasks) FROM stageq.logs`).Scan(&failed, &abandoned, &tasksLeft); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d cuts terminated %d connections; %d attempts abandoned", cuts, terminated, abandoned)
	if failed != 0 || tasksLeft != 0 {
		t.Errorf("%d failed attempts, %d tasks left: infrastructure faults were charged to tasks", failed, tasksLeft)
	}
	if terminated < cuts {
		t.Errorf("only %d connections were terminated in %d cuts: the test cut nothing", terminated, cuts)
	}
}

// TestIdleBodyConnectionKilledChargesNothing (PostgreSQL): the server ends a
// worker's body connection while it waits in the pool between bodies (a
// restart, an administrator's pg_terminate_backend). The next body, more than
// a second later, starts on a live connection: it runs once and succeeds, and
// no attempt is abandoned. Before body connections were pinged after a
// second idle, that body was sent on the dead connection, failed like a body
// cut while it ran, and was abandoned.
func TestIdleBodyConnectionKilledChargesNothing(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t, newPostgresDB(t))
	admin := adminPool(t, db)
	startWorkers(t, db, 1, fastConfig(), nil)
	run := func(process string) {
		t.Helper()
		db.submit(t, plan(process, "", []int{1}, sameBody("SELECT 1"), 1))
		waitFor(t, 30*time.Second, process+" to succeed", func() bool {
			return countOutcome(db.logs(t, dialect.LogFilter{Process: process}), dialect.OutcomeSucceeded) == 1
		})
	}
	// Twice: pgx pings a pooled connection at its first reuse whatever its
	// idle time, so the connection cut is one reused already.
	run("idle-cut-first")
	run("idle-cut-second")
	var killed int
	if err := admin.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
 WHERE datname = current_database() AND state = 'idle' AND query LIKE '/* stageq task %'`).Scan(&killed); err != nil {
		t.Fatalf("terminate: %v", err)
	}
	if killed == 0 {
		t.Fatal("no idle body connection to terminate: the test cut nothing")
	}
	time.Sleep(1500 * time.Millisecond) // past the body pool's ping threshold
	run("idle-cut-after")
	for _, e := range db.logs(t, dialect.LogFilter{Process: "idle-cut-after"}) {
		if e.Outcome != dialect.OutcomeSucceeded || e.Attempt != 1 {
			t.Errorf("the body after the cut: attempt %d %s (%s); want one attempt, succeeded", e.Attempt, e.Outcome, e.Error)
		}
	}
}

// adminPool is a pool for a test's own checks on db, named so that the
// terminations of the workers' connections spare it (application_name
// stageq-test-admin); it closes when the test ends.
func adminPool(t *testing.T, db *testDB) *sql.DB {
	t.Helper()
	admin, err := sql.Open("pgx", dsnWith(t, db.DSN, "application_name", "stageq-test-admin"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	return admin
}

// checkNoneCharged: every task of the process succeeded and no attempt failed.
func checkNoneCharged(t *testing.T, db *testDB, process string, entries []dialect.LogEntry, n int) {
	t.Helper()
	if got := countOutcome(entries, dialect.OutcomeSucceeded); got != n {
		t.Errorf("%d of %d tasks succeeded", got, n)
	}
	for _, e := range entries {
		if e.Outcome == dialect.OutcomeFailed {
			t.Errorf("task %d attempt %d failed: %s", e.TaskID, e.Attempt, e.Error)
		}
	}
	tasks := db.tasks(t, dialect.TaskFilter{Process: process})
	if len(tasks) != 0 {
		t.Errorf("%d tasks left in the queue: %s", len(tasks), fmt.Sprint(tasks))
	}
}

// TestBodyErrorsThatLookLikeALostConnection (PostgreSQL): a body may raise
// any SQLSTATE, the ones of a lost connection included (57P01, class 08, the
// session timeouts 57P05, 25P03 and 25P04).
// Its connection still answers, so the error is the body's: the attempt is
// charged (failed), not abandoned as an infrastructure fault would be.
func TestBodyErrorsThatLookLikeALostConnection(t *testing.T) {
	for _, atomic := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "atomic"}[atomic], func(t *testing.T) {
			db := newTestDB(t, newPostgresDB(t))
			raise := func(code string) string {
				return fmt.Sprintf(`DO $$ BEGIN RAISE EXCEPTION 'the body says %s' USING ERRCODE = '%s'; END $$`, code, code)
			}
			codes := []string{"57P01", "08006", "57P05", "25P03", "25P04"}
			p := plan("lookalike", "", []int{1}, func(_, i int) string { return raise(codes[i]) }, len(codes))
			p.Defaults.MaxAttempts = 1
			p.Defaults.Atomic = atomic
			db.submit(t, p)
			startWorkers(t, db, 1, fastConfig(), nil)
			waitFor(t, time.Minute, "every attempt to end", func() bool {
				n := 0
				for _, e := range db.logs(t, dialect.LogFilter{Process: "lookalike"}) {
					if e.EndedAt != nil {
						n++
					}
				}
				return n >= len(codes)
			})
			entries := db.logs(t, dialect.LogFilter{Process: "lookalike"})
			for _, e := range entries {
				if e.Outcome != dialect.OutcomeFailed || !strings.Contains(e.Error, "the body says") {
					t.Errorf("task %d attempt %d: %s %q, want failed with the body's own error", e.TaskID, e.Attempt, e.Outcome, e.Error)
				}
			}
			if len(entries) != len(codes) {
				t.Errorf("%d attempts, want %d (one per task, max_attempts 1)", len(entries), len(codes))
			}
		})
	}
}

// TestLeaseExtensionPassesALockedRow (PostgreSQL): another transaction holds
// one of a worker's running task rows (an operator's SELECT ... FOR UPDATE).
// Extending the worker's leases does not wait for it: the other leases are
// extended at once, and the held one is answered as still the worker's while
// half a lease of it is left, as lost past that. Before, the extension waited
// for the lock past the leases' expiry, and the worker abandoned every
// attempt it ran.
func TestLeaseExtensionPassesALockedRow(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t, newPostgresDB(t))
	twoStages(t, db, "locked-row", 2)
	got := claimAs(t, db, "w", 1, 10, nil)
	if len(got) != 2 {
		t.Fatalf("claimed %d tasks; want 2", len(got))
	}
	tx, err := db.D.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SELECT 1 FROM stageq.tasks WHERE id = $1 FOR UPDATE", got[0].ID); err != nil {
		t.Fatal(err)
	}
	expires := func(id int64) (at time.Time) {
		t.Helper()
		if err := db.D.DB().QueryRowContext(ctx, "SELECT lease_expires_at FROM stageq.tasks WHERE id = $1", id).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	before := expires(got[1].ID)
	leases := []dialect.TaskLease{{ID: got[0].ID, Token: 1}, {ID: got[1].ID, Token: 1}}
	extend := func(lease time.Duration) []dialect.TaskLease {
		t.Helper()
		ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		held, err := db.D.TaskExtendLeases(ectx, dialect.ExtendParams{WorkerID: "w", Lease: lease, Tasks: leases})
		if err != nil {
			t.Fatalf("extend beside a locked row: %v", err)
		}
		return held
	}
	// The claim's lease is a minute: most of it is left.
	if held := extend(time.Minute); len(held) != 2 {
		t.Fatalf("held %+v; want both leases, the locked one too", held)
	}
	if after := expires(got[1].ID); !after.After(before) {
		t.Errorf("the unlocked task's lease ends %v (was %v); want it extended", after, before)
	}
	// Asked to hold them for two hours, less than half of that is left of
	// the locked one's: it may expire before a beat can extend it, and is
	// answered as lost, for the worker to stop its attempt in time.
	if held := extend(2 * time.Hour); len(held) != 1 || held[0].ID != got[1].ID {
		t.Fatalf("held %+v; want the unlocked task's lease alone", held)
	}
}

// TestFinishBatchPassesALockedRow (PostgreSQL): another transaction holds two
// of a worker's task rows (an operator's SELECT ... FOR UPDATE) when their
// bodies end. The first one's end holds the finisher up, so the next ends
// gather behind it and go in one batch with the second held row; that batch
// fails at the statement timeout. Its other ends are then sent again one by
// one and recorded: those tasks ran once. Before, they failed with the batch,
// and their attempts ran again once their leases expired.
func TestFinishBatchPassesALockedRow(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t, newPostgresDB(t))
	db.submit(t, plan("held", "first", []int{1}, sameBody("y"), 1))
	db.submit(t, plan("held", "work", []int{1}, sameBody("x"), 4))
	firstDone, release := make(chan struct{}), make(chan struct{})
	var started atomic.Int32
	cfg := fastConfig()
	cfg.Concurrency, cfg.Lease, cfg.StatementTimeout = 5, 5*time.Second, time.Second
	startWorkers(t, db, 1, cfg, func(w *queue.Worker) {
		w.Handle("first", func(context.Context, *queue.Task) error {
			started.Add(1)
			<-release
			close(firstDone)
			return nil
		})
		w.Handle("work", func(context.Context, *queue.Task) error {
			started.Add(1)
			<-firstDone
			time.Sleep(100 * time.Millisecond) // behind the first's blocked end
			return nil
		})
	})
	waitFor(t, 20*time.Second, "the five bodies to run", func() bool { return started.Load() == 5 })
	tx, err := db.D.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var lockedWork int64
	if err := tx.QueryRowContext(ctx, `SELECT max(id) FROM stageq.tasks WHERE kind = 'work'`).Scan(&lockedWork); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT 1 FROM stageq.tasks WHERE kind = 'first' OR id = $1 FOR UPDATE`, lockedWork); err != nil {
		t.Fatal(err)
	}
	close(release)
	waitFor(t, 20*time.Second, "the three unlocked tasks' ends to be recorded while the rows are held", func() bool {
		return len(db.logs(t, dialect.LogFilter{Process: "held", Outcome: dialect.OutcomeSucceeded})) == 3
	})
	tx.Rollback()
	waitFor(t, 30*time.Second, "every task to succeed once the rows are free", func() bool {
		return len(db.logs(t, dialect.LogFilter{Process: "held", Outcome: dialect.OutcomeSucceeded})) == 5
	})
	for _, e := range db.logs(t, dialect.LogFilter{Process: "held"}) {
		if e.TaskID != lockedWork && e.Kind == "work" && (e.Attempt != 1 || e.Outcome != dialect.OutcomeSucceeded) {
			t.Errorf("task %d, whose row no one held: attempt %d %s; want one succeeded attempt", e.TaskID, e.Attempt, e.Outcome)
		}
	}
}
