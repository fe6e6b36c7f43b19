package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/migrations"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/routines"
	"github.com/stageq/stageq/stages"
)

// TestPruneBetweenCheckAndRegister forces the interleaving of a worker's start
// with `queuectl migrate prune-routines`: the worker's client has checked its
// routine version (release N, this binary), then, before the worker registers,
// a prune that counts no release-N worker drops that version (release N+1 is
// installed, so N is not the newest). The worker must see it at start, after
// registering: without Migrate it stops there with ErrSchemaMismatch, claims
// nothing and leaves its row stopped; with Migrate it installs N again and
// runs. Registered, it is counted, and a prune keeps its version.
func TestPruneBetweenCheckAndRegister(t *testing.T) {
	forEachDialectBeside(t, func(t *testing.T, db, next *testDB, rN, rNext dialect.Routines) {
		ctx := context.Background()
		prune := func() []int {
			t.Helper()
			dropped, err := routines.Prune(ctx, next.D.DB(), rNext, time.Minute)
			if err != nil {
				t.Fatalf("prune: %v", err)
			}
			return dropped
		}
		one := 1
		next.submit(t, stages.Plan{Process: "pruned", Stages: []stages.Stage{{Order: &one,
			Tasks: []stages.Task{{Kind: "wait", Body: "1ms"}}}}})

		// Without Migrate: checked, pruned, then started.
		plain, err := queue.Open(ctx, db.DSN, queue.Config{})
		if err != nil {
			t.Fatalf("release N's client before the prune: %v", err)
		}
		defer plain.Close()
		if got := prune(); len(got) != 1 || got[0] != rN.Version {
			t.Fatalf("prune dropped %v; want release N's version %d", got, rN.Version)
		}
		w := waitWorker(t, plain, "pruned-plain")
		runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = w.Run(runCtx)
		timedOut := runCtx.Err() != nil
		cancel()
		if !errors.Is(err, migrations.ErrSchemaMismatch) || !errors.Is(err, routines.ErrNotInstalled) {
			t.Fatalf("a worker whose routines were pruned before it registered: Run = %v; want ErrSchemaMismatch (not installed)", err)
		}
		if timedOut {
			t.Fatalf("Run ended by the test's timeout, not at start: %v", err)
		}
		if n := len(db.logs(t, dialect.LogFilter{Process: "pruned"})); n != 0 {
			t.Errorf("the worker without its routines made %d attempts; want none", n)
		}
		checkWorkerStopped(t, db, "pruned-plain")

		// With Migrate: the client opened (and found N) before a prune, so the
		// worker puts N back once registered, and runs.
		if err := routines.Install(ctx, db.D.DB(), rN); err != nil {
			t.Fatal(err)
		}
		healing, err := queue.Open(ctx, db.DSN, queue.Config{Migrate: true})
		if err != nil {
			t.Fatalf("release N's client with Migrate: %v", err)
		}
		defer healing.Close()
		if got := prune(); len(got) != 1 || got[0] != rN.Version {
			t.Fatalf("second prune dropped %v; want release N's version %d", got, rN.Version)
		}
		hw := runInBackground(t, waitWorker(t, healing, "pruned-migrate"))
		waitFor(t, 30*time.Second, "the Migrate worker to run the task", func() bool {
			if err, ok := hw.stopped(); ok {
				t.Fatalf("the Migrate worker stopped: %v", err)
			}
			return countOutcome(db.logs(t, dialect.LogFilter{Process: "pruned"}), dialect.OutcomeSucceeded) == 1
		})
		if err := routines.Check(ctx, db.D.DB(), rN); err != nil {
			t.Errorf("release N's routines after the Migrate worker started: %v", err)
		}
		// Registered and heartbeating, the worker is counted: N stays.
		if got := prune(); len(got) != 0 {
			t.Errorf("a prune with a live release-N worker dropped %v; want nothing", got)
		}
	})
}

// TestRoutinesCheckWaitsForPrune: the check a worker makes after registering
// reads under the lock a prune (or an install) holds, so it cannot read a
// version that a prune in progress is about to drop. First the lock is held
// and let go with nothing done; then a prune in progress, which counted no
// worker, drops this binary's version under it and commits while the check
// waits: the check must report the version gone, not what it saw before.
func TestRoutinesCheckWaitsForPrune(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		r := db.D.Schema().Routines
		if r == nil {
			return // SQLite keeps no routines
		}
		ctx := context.Background()
		check := func(what string, end func() error) error {
			t.Helper()
			done := make(chan error, 1)
			go func() { done <- routines.Check(ctx, db.D.DB(), *r) }()
			select {
			case err := <-done:
				t.Fatalf("check went past %s: %v", what, err)
			case <-time.After(300 * time.Millisecond):
			}
			if err := end(); err != nil {
				t.Fatal(err)
			}
			return <-done
		}
		hold := holdRoutinesLock(t, db, r.SQL.Lock)
		if err := check("a held prune lock", hold.Rollback); err != nil {
			t.Errorf("check once the lock was let go: %v", err)
		}

		prune := holdRoutinesLock(t, db, r.SQL.Lock)
		if err := r.SQL.DropNamespace(ctx, prune, r.Namespace()); err != nil {
			t.Fatal(err)
		}
		if _, err := prune.ExecContext(ctx, r.SQL.Forget, r.SQL.Arg("pVersion", r.Version)); err != nil {
			t.Fatal(err)
		}
		if err := check("a prune in progress", prune.Commit); !errors.Is(err, routines.ErrNotInstalled) {
			t.Errorf("check that waited for a prune of its version: %v; want ErrNotInstalled", err)
		}
	})
}

// forEachDialectBeside is forEachDialect with a simulated release N+1 opened
// beside this binary's release N on db (its routines installed, so N is not
// the newest and a prune may drop it): fn gets N+1's handle and both routine
// versions. fn does not run on a dialect that keeps no routines (SQLite).
func forEachDialectBeside(t *testing.T, fn func(t *testing.T, db, next *testDB, rN, rNext dialect.Routines)) {
	t.Helper()
	forEachDialect(t, func(t *testing.T, db *testDB) {
		if db.D.Schema().Routines == nil {
			return // SQLite: its logic is Go, versioned with the binary; nothing to prune
		}
		next := openRelease(t, db, nextRelease(t, db, 0))
		fn(t, db, next, *db.D.Schema().Routines, *next.D.Schema().Routines)
	})
}

// waitWorker is a worker of client c, named id, that runs the "wait" tasks,
// two at a time (so it claims beside a task that runs long).
func waitWorker(t *testing.T, c *queue.Client, id string) *queue.Worker {
	t.Helper()
	cfg := fastConfig()
	cfg.ID, cfg.Concurrency = id, 2
	w, err := queue.NewWorker(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Handle("wait", waitBody); err != nil {
		t.Fatal(err)
	}
	return w
}

// runningWorker is a worker's Run in the background, stopped and waited for
// when the test ends.
type runningWorker struct {
	cancel context.CancelFunc
	done   chan error
}

func runInBackground(t *testing.T, w *queue.Worker) *runningWorker {
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningWorker{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() { r.stop() })
	return r
}

// stopped reports whether Run has returned, and what, without waiting.
func (r *runningWorker) stopped() (error, bool) {
	select {
	case err := <-r.done:
		r.done <- err // for the next look
		return err, true
	default:
		return nil, false
	}
}

// stop ends Run and returns what it returned.
func (r *runningWorker) stop() error {
	r.cancel()
	err := <-r.done
	r.done <- err
	return err
}

// checkWorkerStopped: the worker named id has its row, marked stopped.
func checkWorkerStopped(t *testing.T, db *testDB, id string) {
	t.Helper()
	workers, err := limOperator(t, db).WorkerList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, ws := range workers {
		if ws.ID == id {
			if ws.StoppedAt == nil {
				t.Errorf("the worker that stopped is not marked stopped: %+v", ws)
			}
			return
		}
	}
	t.Errorf("the worker that stopped left no row (it registers before it checks): %+v", workers)
}

// TestRoutinesPrunedWhileRunning: a prune whose live window is shorter than
// the gap between a running worker's heartbeats counts the worker dead and
// drops the routine version it calls (release N, this binary's; N+1 is
// installed, so N is not the newest). The worker's next claim fails. Without
// Migrate it must find out why and stop with ErrSchemaMismatch (not
// installed), its row marked stopped, instead of failing claims until someone
// looks; with Migrate it installs N again and goes on running tasks.
func TestRoutinesPrunedWhileRunning(t *testing.T) {
	forEachDialectBeside(t, func(t *testing.T, db, next *testDB, rN, rNext dialect.Routines) {
		ctx := context.Background()
		one := 1
		submit := func(process string) {
			t.Helper()
			next.submit(t, stages.Plan{Process: process, Stages: []stages.Stage{{Order: &one,
				Tasks: []stages.Task{{Kind: "wait", Body: "1ms"}}}}})
		}
		succeeded := func(process string) int {
			return countOutcome(db.logs(t, dialect.LogFilter{Process: process}), dialect.OutcomeSucceeded)
		}
		for _, migrate := range []bool{false, true} {
			id := fmt.Sprintf("pruned-while-running-migrate-%t", migrate)
			c, err := queue.Open(ctx, db.DSN, queue.Config{Migrate: migrate})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			w := waitWorker(t, c, id)
			if !migrate {
				// A task this worker is running when its routines go: it
				// could not record its end, so it must not hold the worker
				// for the shutdown grace period (30 s). Only this worker
				// runs its kind.
				if err := w.Handle("hold", waitBody); err != nil {
					t.Fatal(err)
				}
			}
			r := runInBackground(t, w)
			submit(id + "-before")
			waitFor(t, 30*time.Second, "the worker to run a task before the prune", func() bool {
				if err, ok := r.stopped(); ok {
					t.Fatalf("the worker stopped before the prune: %v", err)
				}
				return succeeded(id+"-before") == 1
			})
			if !migrate {
				next.submit(t, stages.Plan{Process: id + "-hold", Stages: []stages.Stage{{Order: &one,
					Tasks: []stages.Task{{Kind: "hold", Body: "2m"}}}}})
				waitFor(t, 30*time.Second, "the hold task to run", func() bool {
					tasks := db.tasks(t, dialect.TaskFilter{Process: id + "-hold"})
					return len(tasks) == 1 && tasks[0].State == "running"
				})
			}
			// The prune is retried until its 1 ms window misses a heartbeat.
			waitFor(t, 30*time.Second, "a prune that counts the running worker dead", func() bool {
				dropped, err := routines.Prune(ctx, next.D.DB(), rNext, time.Millisecond)
				if err != nil {
					t.Fatalf("prune: %v", err)
				}
				return len(dropped) == 1 && dropped[0] == rN.Version
			})
			submit(id + "-after")
			if !migrate {
				var err error
				waitFor(t, 20*time.Second, "the worker to stop, before its grace period for the running task is over", func() bool {
					var ok bool
					err, ok = r.stopped()
					return ok
				})
				if !errors.Is(err, migrations.ErrSchemaMismatch) || !errors.Is(err, routines.ErrNotInstalled) {
					t.Fatalf("a worker whose routines were pruned while it ran: Run = %v; want ErrSchemaMismatch (not installed)", err)
				}
				if n := len(db.logs(t, dialect.LogFilter{Process: id + "-after"})); n != 0 {
					t.Errorf("the worker without its routines made %d attempts; want none", n)
				}
				checkWorkerStopped(t, db, id)
				// The next leg starts from release N installed again.
				if err := routines.Install(ctx, db.D.DB(), rN); err != nil {
					t.Fatal(err)
				}
				continue
			}
			waitFor(t, 30*time.Second, "the Migrate worker to run the task submitted after the prune", func() bool {
				if err, ok := r.stopped(); ok {
					t.Fatalf("the Migrate worker stopped: %v", err)
				}
				return succeeded(id+"-after") == 1
			})
			if err := routines.Check(ctx, db.D.DB(), rN); err != nil {
				t.Errorf("release N's routines after the Migrate worker went on: %v", err)
			}
			if err := r.stop(); err != nil {
				t.Errorf("the Migrate worker's Run = %v; want nil after its stop", err)
			}
		}
	})
}
