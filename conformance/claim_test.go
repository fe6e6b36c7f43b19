package conformance

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// TestNoDoubleClaim: 8 concurrent workers — 4 goroutines in this process and 4
// worker processes — drain 2,000 SQL tasks; every task ran exactly once.
func TestNoDoubleClaim(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		const n = 2000
		db.exec(t, "CREATE TABLE conf_runs (n INT NOT NULL)")
		p := stages.Plan{Process: "drain"}
		order := 100
		s := stages.Stage{Order: &order}
		for i := range n {
			s.Tasks = append(s.Tasks, stages.Task{Body: fmt.Sprintf("INSERT INTO conf_runs (n) VALUES (%d)", i)})
		}
		p.Stages = []stages.Stage{s}
		db.submit(t, p)

		// Leases long enough that a slow database (SQLite under -race) never
		// lets one lapse: this test is about claims, not rescue.
		cfg := fastConfig()
		cfg.Concurrency = 2
		cfg.Lease, cfg.Heartbeat = 20*time.Second, time.Second
		startWorkers(t, db, 4, cfg, nil)
		for range 4 {
			spawnWorker(t, db, "--concurrency", "2", "--lease", "20s", "--poll-max", "100ms")
		}
		waitFor(t, 3*time.Minute, "all tasks to run", func() bool {
			return db.count(t, "SELECT count(*) FROM conf_runs") >= n && len(db.logs(t, dialect.LogFilter{Outcome: dialect.OutcomeSucceeded})) >= n
		})
		// Let any double run that is still in flight land before counting.
		time.Sleep(300 * time.Millisecond)
		if got := db.count(t, "SELECT count(*) FROM conf_runs"); got != n {
			t.Errorf("bodies ran %d times for %d tasks", got, n)
		}
		if got := db.count(t, "SELECT count(DISTINCT n) FROM conf_runs"); got != n {
			t.Errorf("%d distinct tasks ran, want %d", got, n)
		}
		entries := db.logs(t, dialect.LogFilter{})
		seen := map[int64]int{}
		workers := map[string]bool{}
		for _, e := range entries {
			if neverStarted(e) {
				continue // a prefetched task handed back unrun (a stall of a second does it)
			}
			if e.Outcome != dialect.OutcomeSucceeded {
				t.Errorf("log %d: outcome %s (%s), want succeeded", e.ID, e.Outcome, e.Error)
			}
			seen[e.TaskID]++
			workers[e.WorkerID] = true
		}
		for id, c := range seen {
			if c != 1 {
				t.Errorf("task %d has %d attempts that ran", id, c)
			}
		}
		if len(seen) != n {
			t.Errorf("%d tasks in logs, want %d", len(seen), n)
		}
		if len(workers) < 2 {
			t.Errorf("only %d worker(s) ran tasks; the test needs real concurrency", len(workers))
		}
		t.Logf("%d tasks by %d workers", len(seen), len(workers))
	})
}

// TestStageOrder: several processes with several stages under many workers. From
// Logs, no task started before every lower-order task of its process had ended,
// same-order tasks overlapped, and processes progressed independently.
func TestStageOrder(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		orders := []int{100, 200, 300, 400}
		for _, name := range []string{"alpha", "beta", "gamma"} {
			db.submit(t, plan(name, "work", orders, sameBody("150ms"), 4))
		}
		// The default process keeps the seed's global barrier too.
		for _, o := range []int{200, 100} {
			db.enqueue(t, "", o, stages.Task{Kind: "work", Body: "30ms"})
		}
		cfg := fastConfig()
		cfg.Concurrency = 3
		startWorkers(t, db, 4, cfg, func(w *queue.Worker) { w.Handle("work", waitBody) })
		total := 3*len(orders)*4 + 2
		waitFor(t, time.Minute, "all tasks to succeed", func() bool {
			return len(db.logs(t, dialect.LogFilter{Outcome: dialect.OutcomeSucceeded})) == total
		})
		entries := db.logs(t, dialect.LogFilter{})
		rs := runs(entries)
		if v := stages.CheckOrder(rs); len(v) > 0 {
			for _, x := range v {
				t.Error(x)
			}
		}
		overlapped := 0
		for _, name := range []string{"alpha", "beta", "gamma"} {
			for _, o := range orders {
				if stages.MaxOverlap(rs, func(r stages.Run) bool { return r.Process == name && r.Order == o }) >= 2 {
					overlapped++
				}
			}
			// The last stage's end is derived once its completion committed.
			waitFor(t, 10*time.Second, "process "+name+" to succeed", func() bool {
				pi, err := db.D.ProcessGet(ctx, name)
				return err == nil && pi.State == dialect.ProcessSucceeded
			})
		}
		if overlapped < 6 {
			t.Errorf("same-order tasks overlapped in only %d of 12 stages; stages should run in parallel", overlapped)
		}
		// Different processes progress independently: some task of one process ran
		// while a different stage of another process ran.
		cross := false
		for _, a := range rs {
			for _, b := range rs {
				if a.Process != b.Process && a.Order != b.Order && a.Start.Before(*b.End) && b.Start.Before(*a.End) {
					cross = true
				}
			}
		}
		if !cross {
			t.Error("no two processes ever ran different stages at the same time")
		}
	})
}

// TestLowerOrderArrivesLater: a task of a lower order added to a process whose
// higher stage is waiting blocks that stage again until it finishes.
func TestLowerOrderArrivesLater(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		for _, o := range []int{300, 100} {
			db.enqueue(t, "late", o, stages.Task{Kind: "work", Body: "x"})
		}
		states := stageStates(t, db, "late")
		if !slices.Equal(states[100], []string{dialect.StateAvailable}) || !slices.Equal(states[300], []string{dialect.StateBlocked}) {
			t.Fatalf("states by order = %v, want 100 available and 300 blocked", states)
		}
		var order []int
		var mu sync.Mutex
		startWorkers(t, db, 1, fastConfig(), func(w *queue.Worker) {
			w.Handle("work", func(ctx context.Context, task *queue.Task) error {
				mu.Lock()
				order = append(order, task.Order)
				mu.Unlock()
				return nil
			})
		})
		waitFor(t, 30*time.Second, "both tasks", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(order) == 2
		})
		if order[0] != 100 || order[1] != 300 {
			t.Errorf("ran orders %v, want [100 300]", order)
		}
	})
}

// TestAtomicSubmission: a reader polling while a large plan is submitted sees
// none of it or all of it, and a worker running meanwhile never claims a task
// of it before the whole plan has committed.
func TestAtomicSubmission(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		const perStage = 500
		p := plan("big", "work", []int{100, 200, 300}, sameBody("x"), perStage)
		total := 3 * perStage

		var claimedEarly atomic.Int64
		var submitted atomic.Bool
		cfg := fastConfig()
		cfg.Concurrency = 4
		startWorkers(t, db, 2, cfg, func(w *queue.Worker) {
			w.Handle("work", func(ctx context.Context, task *queue.Task) error {
				if !submitted.Load() {
					claimedEarly.Add(1)
				}
				return nil
			})
		})

		// A reader counts the process's tasks while the submission is open: a
		// read that starts before the commit must see none of the plan.
		stop := make(chan struct{})
		seen := make(chan []int, 1)
		var looks atomic.Int64
		go func() {
			var before []int
			defer func() { seen <- before }()
			for {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
				}
				// A raw read on a connection of its own, as another program would
				// look; it counts only when it also ended before the commit began.
				var n int
				open := !submitted.Load()
				err := db.D.DB().QueryRowContext(ctx, "SELECT count(*) FROM "+db.table("tasks")).Scan(&n)
				if err == nil && open && !submitted.Load() {
					before = append(before, n)
					looks.Add(1)
				}
			}
		}()
		time.Sleep(50 * time.Millisecond)
		tx := db.holdSubmission(t, p)
		// A window in which half a plan would show, held until the reader has
		// looked often enough while it is open (a loaded machine reads more
		// slowly).
		opened := looks.Load()
		time.Sleep(200 * time.Millisecond)
		for deadline := time.Now().Add(20 * time.Second); looks.Load()-opened < 10 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		submitted.Store(true)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		close(stop)
		before := <-seen
		if len(before) < 10 {
			t.Errorf("the reader looked only %d times while the submission was open", len(before))
		}
		for _, n := range before {
			if n != 0 {
				t.Errorf("a reader saw %d of %d tasks of an uncommitted plan", n, total)
				break
			}
		}
		waitFor(t, 2*time.Minute, "the plan to drain", func() bool {
			return len(db.logs(t, dialect.LogFilter{Process: "big", Outcome: dialect.OutcomeSucceeded})) == total
		})
		if c := claimedEarly.Load(); c > 0 {
			t.Errorf("%d tasks were claimed before the submission committed", c)
		}
		if v := stages.CheckOrder(runs(db.logs(t, dialect.LogFilter{}))); len(v) > 0 {
			t.Errorf("barrier violated: %v", v[0])
		}
	})
}

// TestHandedBackTaskWaitsForLowerOrder: a task that was running when a lower
// order arrived in its process goes back as blocked, not available, when its
// attempt fails, is released or is rescued: it must not run before the lower
// stage has finished.
func TestHandedBackTaskWaitsForLowerOrder(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		for i, outcome := range []dialect.Outcome{dialect.OutcomeFailed, dialect.OutcomeReleased, dialect.OutcomeAbandoned} {
			process := fmt.Sprintf("handback-%d", i)
			high := db.enqueue(t, process, 300, stages.Task{Kind: "work", Body: "x"})
			lease := time.Minute
			if outcome == dialect.OutcomeAbandoned {
				lease = 200 * time.Millisecond
			}
			got, err := db.D.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w", Max: 1, Token: int64(100 + i), Lease: lease})
			if err != nil || len(got) != 1 || got[0].ID != high {
				t.Fatalf("claim = %+v, %v", got, err)
			}
			db.enqueue(t, process, 100, stages.Task{Kind: "work", Body: "y"})
			switch outcome {
			case dialect.OutcomeAbandoned:
				db.waitRescue(t, "the rescue")
			default:
				fp := dialect.FinishParams{TaskID: high, Token: int64(100 + i), Outcome: outcome, Error: "boom"}
				if outcome == dialect.OutcomeFailed {
					fp.RetryAfter = time.Millisecond
				}
				if err := db.finish(ctx, fp); err != nil {
					t.Fatal(err)
				}
			}
			tasks := db.tasks(t, dialect.TaskFilter{Process: process})
			for _, tk := range tasks {
				want := dialect.StateAvailable
				if tk.Order == 300 {
					want = dialect.StateBlocked
				}
				if tk.State != want {
					t.Errorf("%s: task of order %d is %s, want %s", outcome, tk.Order, tk.State, want)
				}
			}
			// Drain this process before the next case, so claims stay unambiguous.
			next, err := db.D.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w", Max: 5, Token: int64(200 + i), Lease: time.Minute})
			if err != nil || len(next) != 1 || next[0].Order != 100 {
				t.Fatalf("%s: next claim = %+v, %v; want only the order-100 task", outcome, next, err)
			}
			if err := db.finish(ctx, dialect.FinishParams{TaskID: next[0].ID, Token: int64(200 + i), Outcome: dialect.OutcomeSucceeded}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond) // the retry's run_at
			last, err := db.D.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w", Max: 5, Token: int64(300 + i), Lease: time.Minute})
			if err != nil || len(last) != 1 || last[0].ID != high {
				t.Fatalf("%s: after the lower stage, claim = %+v, %v; want the handed-back task", outcome, last, err)
			}
			if err := db.finish(ctx, dialect.FinishParams{TaskID: high, Token: int64(300 + i), Outcome: dialect.OutcomeSucceeded}); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestWorkersClaimOnlyTheirKinds (issue 10, item 5): a worker claims only the
// kinds it can run. Plain worker processes (SQL bodies only) drain a queue that
// also holds "report" and "exec" tasks ahead of the SQL ones; those wait with
// their attempts untouched, `queuectl why` names the reason, and an in-process
// worker with a "report" handler then runs them. No attempt fails. Both claim
// paths: without limits, and gated (a limit exists, on another key).
func TestWorkersClaimOnlyTheirKinds(t *testing.T) {
	for _, gated := range []bool{false, true} {
		t.Run(map[bool]string{false: "ungated", true: "gated"}[gated], func(t *testing.T) {
			forEachDialect(t, func(t *testing.T, db *testDB) { claimOnlyTheirKinds(t, db, gated) })
		})
	}
}

func claimOnlyTheirKinds(t *testing.T, db *testDB, gated bool) {
	db.skipOnBabelfish(t, "no claim there (harness_test.go)")
	if gated {
		db.setLimit(t, "elsewhere", 5)
	}
	one := 1
	// The other kinds are enqueued first: they head the claim order.
	p := stages.Plan{Process: "kinds", Stages: []stages.Stage{{Order: &one, Tasks: []stages.Task{
		{Kind: "report", Body: "r1"}, {Kind: "report", Body: "r2"}, {Kind: "exec", Body: "true"},
	}}}}
	res := db.submit(t, p)
	const nSQL = 6
	for i := range nSQL {
		db.enqueue(t, "sqlonly", 1, stages.Task{Body: db.sleepSQL(0.05) + " -- " + strconv.Itoa(i)})
	}
	args := []string{"--concurrency", "2", "--poll-max", "50ms", "--heartbeat", "300ms", "--lease", "2s"}
	a, b := spawnWorker(t, db, args...), spawnWorker(t, db, args...)
	waitFor(t, time.Minute, "the SQL tasks to succeed", func() bool {
		return len(db.logs(t, dialect.LogFilter{Process: "sqlonly", Outcome: dialect.OutcomeSucceeded})) == nSQL
	})
	// Every claim of the SQL workers has walked past the other kinds by now.
	if got := db.logs(t, dialect.LogFilter{Process: "kinds"}); len(got) != 0 {
		t.Fatalf("SQL-only workers started %d attempt(s) of other kinds: %+v", len(got), got)
	}
	tasks := db.tasks(t, dialect.TaskFilter{Process: "kinds"})
	if len(tasks) != 3 {
		t.Fatalf("%d tasks of process kinds left, want 3: %+v", len(tasks), tasks)
	}
	for _, task := range tasks {
		if task.State != dialect.StateAvailable || task.Attempt != 0 {
			t.Errorf("task %d (%s): state %s attempt %d, want available with no attempt", task.ID, task.Kind, task.State, task.Attempt)
		}
	}
	code, out, errOut := runCLI(t, "queuectl", "", "--dsn", db.DSN, "why", strconv.FormatInt(res.TaskIDs[0], 10))
	if code != 0 || !strings.Contains(out, `No live worker runs kind "report"`) {
		t.Errorf("queuectl why of a report task: exit %d:\n%s%s", code, out, errOut)
	}
	a.kill()
	b.kill()

	cfg := fastConfig()
	cfg.Concurrency = 2
	ran := make(chan string, 4)
	startWorkers(t, db, 1, cfg, func(w *queue.Worker) {
		if err := w.Handle("report", func(ctx context.Context, task *queue.Task) error {
			ran <- task.Body
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(w.Kinds(), ","); got != "report,sql" {
			t.Errorf("worker kinds %q, want report,sql (no exec without AllowExec)", got)
		}
	})
	waitFor(t, time.Minute, "the report tasks to succeed", func() bool {
		return len(db.logs(t, dialect.LogFilter{Process: "kinds", Outcome: dialect.OutcomeSucceeded})) == 2
	})
	// The exec task stays: no worker here allows a program.
	time.Sleep(300 * time.Millisecond)
	entries := db.logs(t, dialect.LogFilter{Process: "kinds"})
	for _, e := range entries {
		if e.Kind != "report" || e.Outcome != dialect.OutcomeSucceeded {
			t.Errorf("attempt of task %d (%s): %s %s", e.TaskID, e.Kind, e.Outcome, e.Error)
		}
	}
	if len(entries) != 2 || len(ran) != 2 {
		t.Errorf("%d attempts logged, %d handler runs; want 2 and 2", len(entries), len(ran))
	}
}
