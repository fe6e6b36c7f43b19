package conformance

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// TestUnlistedLeaseIsNotExtended: a worker's heartbeat extends only the attempts
// it names; a lease it holds but no longer runs expires and is rescued.
func TestUnlistedLeaseIsNotExtended(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		for _, body := range []string{"a", "b"} {
			db.enqueue(t, "orphans", 1, stages.Task{Kind: "work", Body: body})
		}
		// The kept attempt's lease (3 s) outlasts a slow machine's pause
		// between two extensions, and each extension moves it to 30 s; the
		// other's is short.
		var got []dialect.ClaimedTask
		for _, lease := range []time.Duration{3 * time.Second, 600 * time.Millisecond} {
			c, err := db.D.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w", Max: 1, Token: 7, Lease: lease})
			if err != nil || len(c) != 1 {
				t.Fatalf("claim = %+v, %v", c, err)
			}
			got = append(got, c...)
		}
		kept := dialect.TaskLease{ID: got[0].ID, Token: 7}
		deadline := time.Now().Add(30 * time.Second)
		for rescued := false; !rescued; {
			held, err := db.D.TaskExtendLeases(ctx, dialect.ExtendParams{WorkerID: "w", Lease: 30 * time.Second,
				Tasks: []dialect.TaskLease{kept, {ID: got[1].ID, Token: 8}}}) // a wrong token extends nothing
			if err != nil {
				t.Fatal(err)
			}
			if len(held) != 1 || held[0] != kept {
				t.Fatalf("held = %+v, want only %+v", held, kept)
			}
			n, err := db.D.TaskRescueExpired(ctx, dialect.RescueParams{Max: 10})
			switch {
			case err != nil:
				t.Fatal(err)
			case n > 1:
				t.Fatalf("rescued %d attempts, want only the unlisted one", n)
			case n == 1:
				rescued = true
			case time.Now().After(deadline):
				t.Fatalf("the unlisted attempt was not rescued within 30 s")
			default:
				time.Sleep(100 * time.Millisecond)
			}
		}
		// The extension landed: the claim's 3 s would have ended by now or soon.
		if left := leaseExpiry(t, db, kept.ID).Sub(schedDBNow(t, db)); left < 20*time.Second {
			t.Errorf("the kept attempt's lease ends in %s, want about 30 s: the extension did not land", left)
		}
		tasks := db.tasks(t, dialect.TaskFilter{Process: "orphans"})
		states := map[int64]string{}
		for _, tk := range tasks {
			states[tk.ID] = tk.State
		}
		if states[got[0].ID] != dialect.StateRunning || states[got[1].ID] != dialect.StateAvailable {
			t.Errorf("states = %v: want the extended attempt running and the unlisted one rescued", states)
		}
	})
}

// failingFinisher is a real dialect whose first `fail` attempts to record
// results fail, as a dropped connection would make them.
type failingFinisher struct {
	dialect.Dialect
	fail atomic.Int32
}

var errInjected = errors.New("injected: connection reset")

func (f *failingFinisher) TaskFinish(ctx context.Context, tx *sql.Tx, p dialect.FinishParams) error {
	if f.fail.Add(-1) >= 0 {
		return errInjected
	}
	return f.Dialect.TaskFinish(ctx, tx, p)
}

func (f *failingFinisher) TaskFinishMany(ctx context.Context, ps []dialect.FinishParams) (dialect.FinishResult, error) {
	if f.fail.Add(-1) >= 0 {
		return dialect.FinishResult{}, errInjected
	}
	if bf, ok := f.Dialect.(dialect.BatchFinisher); ok {
		return bf.TaskFinishMany(ctx, ps)
	}
	res := dialect.FinishResult{Held: make([]bool, len(ps))}
	for i, p := range ps {
		err := f.Dialect.TaskFinish(ctx, nil, p)
		if err != nil && !errors.Is(err, dialect.ErrLeaseLost) {
			return dialect.FinishResult{}, err
		}
		res.Held[i] = err == nil
	}
	return res, nil
}

// StagesAdvance passes through: the wrapper must not hide that the real
// dialect advances stages after its completions commit.
func (f *failingFinisher) StagesAdvance(ctx context.Context, ids []int64) ([]int64, error) {
	if sa, ok := f.Dialect.(dialect.StageAdvancer); ok {
		return sa.StagesAdvance(ctx, ids)
	}
	return nil, nil
}

// TestFinishFailures: a result that cannot be recorded at first is recorded
// by a retry; one that can never be recorded leaves the attempt to expire, and
// another worker runs the task: nothing stays running for ever.
func TestFinishFailures(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		for _, c := range []struct {
			name     string
			failures int32
			attempts int // Logs rows expected
		}{
			{"transient", 2, 1},
			{"permanent", 1 << 30, 2},
		} {
			process := "finish-" + c.name
			id := db.enqueue(t, process, 1, stages.Task{Kind: "work", Body: "x", MaxAttempts: 5})
			flaky := &failingFinisher{Dialect: db.D}
			flaky.fail.Store(c.failures)
			fc, err := queue.New(ctx, flaky, queue.Config{})
			if err != nil {
				t.Fatal(err)
			}
			cfg := fastConfig()
			w, err := queue.NewWorker(fc, cfg)
			if err != nil {
				t.Fatal(err)
			}
			w.Handle("work", func(context.Context, *queue.Task) error { return nil })
			wctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); w.Run(wctx) }()
			if c.failures > 10 {
				// The broken worker gives up on its result and stops; a healthy
				// one must get the task once the abandoned lease expires.
				waitFor(t, 10*time.Second, "the broken worker to run the task", func() bool {
					return len(db.logs(t, dialect.LogFilter{TaskID: id})) == 1
				})
				stop()
				<-done
				startWorkers(t, db, 1, fastConfig(), func(w *queue.Worker) {
					w.Handle("work", func(context.Context, *queue.Task) error { return nil })
				})
			}
			db.waitSucceeded(t, 30*time.Second, c.name+": the task to succeed", id)
			stop()
			<-done
			if n := len(db.logs(t, dialect.LogFilter{TaskID: id})); n != c.attempts {
				t.Errorf("%s: %d attempts logged, want %d", c.name, n, c.attempts)
			}
			// The stage (and so the process) advances once the completion
			// has committed, in a statement of its own.
			waitFor(t, 10*time.Second, c.name+": the process to succeed", func() bool {
				pi, err := db.D.ProcessGet(ctx, process)
				return err == nil && pi.State == dialect.ProcessSucceeded
			})
		}
	})
}

// TestOpenSubmissionDoesNotStallOthers: an application that enqueues inside a
// long transaction of its own holds its process's row, but workers keep
// claiming the tasks of other processes meanwhile. (SQLite runs one writer at a
// time, so there an open write transaction holds every writer back: by design.)
func TestOpenSubmissionDoesNotStallOthers(t *testing.T) {
	forEachDialectBut(t, "sqlite", "SQLite has one writer at a time: an open write transaction holds every claim back", func(t *testing.T, db *testDB) {
		db.skipOnBabelfish(t, "G1: table hints are ignored, so the claim cannot READPAST the process row an open submission holds")
		tx := busyBesideOthers(t, db, stages.Task{Kind: "work", Body: "first"}, 5)
		defer tx.Rollback()
		startWorkers(t, db, 2, fastConfig(), func(w *queue.Worker) {
			w.Handle("work", func(context.Context, *queue.Task) error { return nil })
		})
		waitFor(t, 15*time.Second, "the other process's tasks to run while the submission is open", func() bool {
			return len(db.logs(t, dialect.LogFilter{Process: "others", Outcome: dialect.OutcomeSucceeded})) == 5
		})
		drainBusy(t, db, tx, 15*time.Second)
	})
}

// TestHandBackDoesNotStallSuccesses (issue 10, item 10): a retry is handed back
// under its process's row lock, which an application's open submission holds;
// the results of other processes' tasks, finished meanwhile by the same
// worker, are recorded without waiting for it. (Not SQLite: one writer.)
func TestHandBackDoesNotStallSuccesses(t *testing.T) {
	recordedBesideHeldProcess(t, "flaky", dialect.OutcomeSucceeded, func(w *queue.Worker) {
		w.Handle("work", func(context.Context, *queue.Task) error {
			time.Sleep(100 * time.Millisecond) // the flaky task fails first
			return nil
		})
		w.Handle("flaky", failOnce)
	})
}

// TestHandBacksOfOtherProcessesDoNotWait: hand-backs are recorded in a batch
// per process, so the retries of other processes' tasks are recorded while
// one process's row is held by an application's open submission, not after
// it (a wait past the statement timeout would leave those attempts to run
// again once their leases expired). (Not SQLite: one writer.)
func TestHandBacksOfOtherProcessesDoNotWait(t *testing.T) {
	recordedBesideHeldProcess(t, "work", dialect.OutcomeFailed, func(w *queue.Worker) {
		w.Handle("work", failOnce)
	})
}

// failOnce is a handler whose first attempt fails, for a retry.
func failOnce(_ context.Context, task *queue.Task) error {
	if task.Attempt == 1 {
		return errors.New("transient")
	}
	return nil
}

// recordedBesideHeldProcess runs busyBesideOthers with a first task of kind
// first on one worker with handlers, and wants the other process's tasks'
// first attempts recorded with outcome while the busy process's row is held,
// and the busy process's hand-back not, until the submission commits.
func recordedBesideHeldProcess(t *testing.T, first string, outcome dialect.Outcome, handlers func(*queue.Worker)) {
	forEachDialectBut(t, "sqlite", "SQLite has one writer at a time: an open write transaction holds every finish back", func(t *testing.T, db *testDB) {
		db.skipOnBabelfish(t, "G1: table hints are ignored (harness_test.go)")
		const n = 6
		tx := busyBesideOthers(t, db, stages.Task{Kind: first, Body: "fails once"}, n)
		defer tx.Rollback()
		cfg := fastConfig()
		cfg.Concurrency = 3
		startWorkers(t, db, 1, cfg, handlers)
		waitFor(t, 15*time.Second, "the other process's ends to be recorded while the submission is open", func() bool {
			return len(db.logs(t, dialect.LogFilter{Process: "others", Outcome: outcome})) == n
		})
		if got := db.logs(t, dialect.LogFilter{Process: "busy", Outcome: dialect.OutcomeFailed}); len(got) != 0 {
			t.Errorf("the hand-back was recorded while its process row was held: %+v", got)
		}
		drainBusy(t, db, tx, 30*time.Second)
	})
}

// busyBesideOthers submits n tasks of kind work to process "others" and the
// task first to process "busy", then a second task of "busy" in a transaction
// it returns still open: an application's long submission, holding busy's
// process row.
func busyBesideOthers(t *testing.T, db *testDB, first stages.Task, n int) *sql.Tx {
	t.Helper()
	db.enqueue(t, "busy", 1, first)
	db.submit(t, plan("others", "work", []int{1}, sameBody("x"), n))
	return db.holdSubmission(t, plan("busy", "work", []int{1}, sameBody("y"), 1))
}

// drainBusy commits the open submission of busyBesideOthers and waits up to
// timeout for both tasks of "busy" to succeed.
func drainBusy(t *testing.T, db *testDB, tx *sql.Tx, timeout time.Duration) {
	t.Helper()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, timeout, "the busy process to drain after the commit", func() bool {
		return len(db.logs(t, dialect.LogFilter{Process: "busy", Outcome: dialect.OutcomeSucceeded})) == 2
	})
}

// TestShutdownWaitsOutASlowRelease (PostgreSQL): a handler that stops at its
// shutdown's cancel has done its part even when recording its release takes
// longer than a lease (an application's transaction holds the process row the
// hand-back locks). The worker waits for the release and stops without an
// error; the task is released once. The lease-long bound of a shutdown is for
// bodies that do not stop, which this one was taken for.
func TestShutdownWaitsOutASlowRelease(t *testing.T) {
	db := newTestDB(t, newPostgresDB(t))
	admin := adminPool(t, db)
	id := db.enqueue(t, "slowrelease", 1, stages.Task{Kind: "stops", Body: "x", MaxAttempts: 1})
	cfg := fastConfig()
	cfg.ShutdownGrace = 10 * time.Millisecond
	started := make(chan struct{})
	pool := startWorkers(t, db, 1, cfg, func(w *queue.Worker) {
		w.Handle("stops", func(ctx context.Context, _ *queue.Task) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
	})
	<-started
	tx, err := admin.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`SELECT 1 FROM stageq.processes WHERE name = 'slowrelease' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	held := time.AfterFunc(cfg.Lease+1500*time.Millisecond, func() { tx.Rollback() }) // past the bound
	defer held.Stop()
	pool.stop()
	select {
	case err := <-pool.errs:
		t.Fatalf("Run: %v; want none: the handler stopped at its cancel", err)
	default:
	}
	wantReleasedOnce(t, db, id)
}
