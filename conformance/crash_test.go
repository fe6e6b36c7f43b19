package conformance

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/stages"
)

// TestCrashRescue: a worker process is killed with SIGKILL mid-task. Its lease
// expires, another worker rescues the task and runs it again, and Logs shows the
// abandoned attempt beside the successful one.
func TestCrashRescue(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		id := db.enqueue(t, "crash", 100, stages.Task{Body: db.sleepSQL(1.5)})
		victim := spawnWorker(t, db, "--lease", "2s", "--heartbeat", "300ms", "--poll-max", "50ms")
		waitFor(t, 20*time.Second, "the victim to start the task", func() bool {
			return len(db.logs(t, dialect.LogFilter{TaskID: id, Outcome: dialect.OutcomeRunning})) == 1
		})
		victim.kill()
		// The lease as the database has it after the kill: the claim's 2 s,
		// moved on by each heartbeat that landed. (A statement the victim sent
		// before dying may still land and move it later: the check below holds
		// all the more.)
		expires := leaseExpiry(t, db, id)

		startWorkers(t, db, 1, fastConfig(), nil)
		db.waitSucceeded(t, 30*time.Second, "the task to succeed after rescue", id)
		entries := db.logs(t, dialect.LogFilter{TaskID: id})
		if len(entries) != 2 {
			t.Fatalf("task %d has %d log rows, want 2 (abandoned, succeeded): %+v", id, len(entries), entries)
		}
		if entries[0].Outcome != dialect.OutcomeAbandoned || entries[0].Attempt != 1 {
			t.Errorf("first attempt: outcome %s attempt %d, want abandoned attempt 1", entries[0].Outcome, entries[0].Attempt)
		}
		if entries[1].Outcome != dialect.OutcomeSucceeded || entries[1].Attempt != 2 {
			t.Errorf("second attempt: outcome %s attempt %d, want succeeded attempt 2", entries[1].Outcome, entries[1].Attempt)
		}
		if entries[0].WorkerID == entries[1].WorkerID {
			t.Errorf("the same worker %s ran both attempts", entries[0].WorkerID)
		}
		// The rescue waited for the lease, extensions included. Both times are
		// the database's.
		if entries[1].StartedAt.Before(expires) {
			t.Errorf("second attempt started at %s, before the victim's lease ended at %s", entries[1].StartedAt, expires)
		}
		if gap := entries[1].StartedAt.Sub(entries[0].StartedAt); gap < 1900*time.Millisecond {
			t.Errorf("second attempt started %s after the first; the claim's 2s lease was not respected", gap)
		}
	})
}

// TestFenceRejectsZombie: a worker whose lease expired and whose task was taken
// by another cannot record a result; the new holder's result stands.
func TestFenceRejectsZombie(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		id := db.enqueue(t, "zombie", 1, stages.Task{Kind: "work", Body: "x"})
		zombie, err := db.D.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "zombie", Max: 1, Token: 111, Lease: 300 * time.Millisecond})
		if err != nil || len(zombie) != 1 || zombie[0].ID != id {
			t.Fatalf("zombie claim = %+v, %v", zombie, err)
		}
		if again, err := db.D.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "other", Max: 1, Token: 222, Lease: time.Minute}); err != nil || len(again) != 0 {
			t.Fatalf("a held task was claimed again: %+v, %v", again, err)
		}
		db.waitRescue(t, "the zombie's lease to be rescued")
		heir, err := db.D.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "heir", Max: 1, Token: 333, Lease: time.Minute})
		if err != nil || len(heir) != 1 || heir[0].Attempt != 2 {
			t.Fatalf("heir claim = %+v, %v", heir, err)
		}
		err = db.finish(ctx, dialect.FinishParams{TaskID: id, Token: 111, Outcome: dialect.OutcomeFailed, Error: "zombie says no"})
		if !errors.Is(err, dialect.ErrLeaseLost) {
			t.Fatalf("zombie finish: err = %v, want ErrLeaseLost", err)
		}
		if held, err := db.D.TaskExtendLeases(ctx, dialect.ExtendParams{WorkerID: "zombie", Lease: time.Minute}); err != nil || len(held) != 0 {
			t.Fatalf("zombie still extends %v (%v)", held, err)
		}
		if err := db.finish(ctx, dialect.FinishParams{TaskID: id, Token: 333, Outcome: dialect.OutcomeSucceeded}); err != nil {
			t.Fatalf("heir finish: %v", err)
		}
		entries := db.logs(t, dialect.LogFilter{TaskID: id})
		if len(entries) != 2 || entries[0].Outcome != dialect.OutcomeAbandoned || entries[1].Outcome != dialect.OutcomeSucceeded {
			t.Fatalf("logs = %+v, want abandoned then succeeded", entries)
		}
		if entries[0].Error == "zombie says no" {
			t.Error("the zombie's result overwrote the log of its abandoned attempt")
		}
	})
}

// TestAtomicSQLTask: an atomic task's body and completion commit together, so
// its effect happens exactly once even when the worker dies mid-run.
func TestAtomicSQLTask(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		db.exec(t, "CREATE TABLE conf_effects (n INT NOT NULL)")
		body := "INSERT INTO conf_effects (n) VALUES (1); " + db.sleepSQL(1.5)
		atomic := true
		id := db.enqueue(t, "atomic", 1, stages.Task{Body: body, Atomic: &atomic})
		victim := spawnWorker(t, db, "--lease", "2s", "--heartbeat", "300ms", "--poll-max", "50ms")
		waitFor(t, 20*time.Second, "the victim to start the task", func() bool {
			return len(db.logs(t, dialect.LogFilter{TaskID: id})) == 1
		})
		time.Sleep(300 * time.Millisecond) // inside the body: the insert ran, the sleep runs
		victim.kill()

		startWorkers(t, db, 1, fastConfig(), nil)
		db.waitSucceeded(t, 30*time.Second, "the task to succeed after rescue", id)
		if n := db.count(t, "SELECT count(*) FROM conf_effects"); n != 1 {
			t.Errorf("the atomic body's effect happened %d times, want exactly 1", n)
		}
		if n := len(db.logs(t, dialect.LogFilter{TaskID: id, Outcome: dialect.OutcomeAbandoned})); n != 1 {
			t.Errorf("%d abandoned attempts logged, want 1", n)
		}
	})
}

// TestAtomicPoisonTask: an atomic task whose body always fails still uses up its
// attempts (they are counted outside the body's transaction) and ends failed.
func TestAtomicPoisonTask(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		atomic := true
		id := db.enqueue(t, "poison", 1, stages.Task{Body: "SELECT * FROM no_such_table", Atomic: &atomic, MaxAttempts: 2})
		startWorkers(t, db, 1, fastConfig(), nil)
		waitFor(t, 30*time.Second, "the task to fail for good", func() bool {
			tasks, err := db.D.TaskList(ctx, dialect.TaskFilter{Process: "poison", State: dialect.StateFailed})
			return err == nil && len(tasks) == 1
		})
		entries := db.logs(t, dialect.LogFilter{TaskID: id})
		if len(entries) != 2 || countOutcome(entries, dialect.OutcomeFailed) != 2 {
			t.Fatalf("logs = %+v, want two failed attempts", entries)
		}
		if entries[1].RetryAt != nil {
			t.Error("the last attempt says another follows")
		}
	})
}

// TestSIGTERMReleases: a worker process sent SIGTERM stops claiming, waits
// --shutdown-grace for its running task, then releases it and exits 0; another
// worker takes the task at once (no lease to wait for).
func TestSIGTERMReleases(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		id := db.enqueue(t, "term", 1, stages.Task{Body: db.endlessSQL(), MaxAttempts: 1})
		w := spawnWorker(t, db, "--lease", "60s", "--shutdown-grace", "300ms", "--poll-max", "50ms")
		waitFor(t, 20*time.Second, "the worker to start the task", func() bool {
			return len(db.logs(t, dialect.LogFilter{TaskID: id})) == 1
		})
		w.terminate(t, true)
		wantReleasedOnce(t, db, id)
		tasks := db.tasks(t, dialect.TaskFilter{Process: "term"})
		if len(tasks) != 1 || tasks[0].State != dialect.StateAvailable || tasks[0].Attempt != 0 {
			t.Fatalf("task after release = %+v, want available with its attempt given back", tasks)
		}
	})
}

// TestSIGTERMReleasesOnlyAStoppedBody (PostgreSQL): a body that catches the
// cancel a shutdown sends (query_canceled) goes on in its session after the
// worker stopped waiting for it. Its task is handed back only once that
// session has ended (the worker terminates it), so no other worker can start
// the task while the first body still runs. Before, the release came at once
// and the body ran on beside its next attempt.
func TestSIGTERMReleasesOnlyAStoppedBody(t *testing.T) {
	db := newTestDB(t, newPostgresDB(t))
	admin := adminPool(t, db)
	body := `DO $$ BEGIN PERFORM pg_sleep(60); EXCEPTION WHEN query_canceled THEN PERFORM pg_sleep(20); END $$`
	id := db.enqueue(t, "stubborn", 1, stages.Task{Body: body, MaxAttempts: 1})
	w := spawnWorker(t, db, "--lease", "60s", "--shutdown-grace", "300ms", "--poll-max", "50ms")
	running := func() int {
		var n int
		if err := admin.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
   AND state <> 'idle' AND query LIKE '%pg_sleep(60)%' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor(t, 20*time.Second, "the body to run", func() bool { return running() == 1 })
	w.terminate(t, true)
	wantReleasedOnce(t, db, id)
	if n := running(); n != 0 {
		t.Fatalf("the task was released while its body still ran in %d session(s)", n)
	}
}

// TestSecondSIGTERMReleasesAtOnce: a second SIGTERM ends the shutdown's grace
// (here a minute): the running task is released at once and the worker exits
// 0, as an operator's second Ctrl-C asks. So does one SIGTERM to a worker
// started with --shutdown-grace 0, which took the library's default, 30 s.
func TestSecondSIGTERMReleasesAtOnce(t *testing.T) {
	for _, grace := range []string{"60s", "0"} {
		t.Run("grace "+grace, func(t *testing.T) {
			db := newTestDB(t, "sqlite://"+filepath.Join(t.TempDir(), "queue.db"))
			id := db.enqueue(t, "term2", 1, stages.Task{Body: db.endlessSQL(), MaxAttempts: 1})
			w := spawnWorker(t, db, "--lease", "60s", "--shutdown-grace", grace, "--poll-max", "50ms")
			waitFor(t, 20*time.Second, "the worker to start the task", func() bool {
				return len(db.logs(t, dialect.LogFilter{TaskID: id})) == 1
			})
			if grace != "0" {
				w.terminate(t, false)
				waitFor(t, 10*time.Second, "the worker to begin its shutdown", func() bool {
					return strings.Contains(w.output(), "waiting for running tasks")
				})
			}
			w.terminate(t, true) // well within a grace of a minute, or the default's 30 s
			wantReleasedOnce(t, db, id)
		})
	}
}

// terminate sends SIGTERM to w and, with wait, waits for it to exit 0.
func (p *workerProcess) terminate(t *testing.T, wait bool) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !wait {
		return
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not exit after SIGTERM")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("worker exited %d after SIGTERM, want 0\n%s", code, p.output())
	}
}

// wantReleasedOnce fails the test unless task id has one attempt in Logs, released.
func wantReleasedOnce(t *testing.T, db *testDB, id int64) {
	t.Helper()
	if entries := db.logs(t, dialect.LogFilter{TaskID: id}); len(entries) != 1 || entries[0].Outcome != dialect.OutcomeReleased {
		t.Fatalf("logs = %+v, want one released attempt", entries)
	}
}
