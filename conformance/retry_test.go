package conformance

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// TestRetryBackoff: failed attempts are retried with growing delays until one
// succeeds; Logs records each failure and when the next attempt was due.
func TestRetryBackoff(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		id := db.enqueue(t, "flaky", 1, stages.Task{Kind: "flaky", Body: "x", MaxAttempts: 4})
		var mu sync.Mutex
		var starts []time.Time
		startWorkers(t, db, 2, fastConfig(), func(w *queue.Worker) {
			w.Handle("flaky", func(ctx context.Context, task *queue.Task) error {
				mu.Lock()
				starts = append(starts, time.Now())
				mu.Unlock()
				if task.Attempt < 3 {
					return errors.New("transient trouble")
				}
				return nil
			})
		})
		db.waitSucceeded(t, 30*time.Second, "the third attempt to succeed", id)
		entries := db.logs(t, dialect.LogFilter{TaskID: id})
		if len(entries) != 3 {
			t.Fatalf("%d attempts logged, want 3", len(entries))
		}
		for i, e := range entries[:2] {
			if e.Outcome != dialect.OutcomeFailed || e.Error != "transient trouble" || e.RetryAt == nil {
				t.Errorf("attempt %d: outcome %s error %q retry_at %v", i+1, e.Outcome, e.Error, e.RetryAt)
			}
		}
		// Backoff base 100ms doubling with ±20% jitter: the second wait is longer.
		d1 := entries[0].RetryAt.Sub(*entries[0].EndedAt)
		d2 := entries[1].RetryAt.Sub(*entries[1].EndedAt)
		if d1 < 70*time.Millisecond || d2 <= d1 {
			t.Errorf("retry delays %s then %s: want >= ~80ms and growing", d1, d2)
		}
		if entries[1].StartedAt.Before(*entries[0].RetryAt) || entries[2].StartedAt.Before(*entries[1].RetryAt) {
			t.Error("an attempt started before its retry time")
		}
	})
}

// TestFailureBlocksOnlyItsProcess: a task out of attempts fails for good, its
// process is failed and its later stages wait; another process runs to the end.
func TestFailureBlocksOnlyItsProcess(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		for _, name := range []string{"broken", "healthy"} {
			kind := "ok"
			if name == "broken" {
				kind = "fail"
			}
			o1, o2 := 100, 200
			p := stages.Plan{Process: name, Stages: []stages.Stage{
				{Order: &o1, Tasks: []stages.Task{{Kind: "ok", Body: "a"}, {Kind: kind, Body: "b", MaxAttempts: 2}}},
				{Order: &o2, Tasks: []stages.Task{{Kind: "ok", Body: "c"}}},
			}}
			db.submit(t, p)
		}
		startWorkers(t, db, 2, fastConfig(), func(w *queue.Worker) {
			w.Handle("ok", func(context.Context, *queue.Task) error { return nil })
			w.Handle("fail", func(context.Context, *queue.Task) error { return errors.New("always broken") })
		})
		waitFor(t, 30*time.Second, "healthy to finish and broken to fail", func() bool {
			h, err1 := db.D.ProcessGet(ctx, "healthy")
			b, err2 := db.D.ProcessGet(ctx, "broken")
			return err1 == nil && err2 == nil && h.State == dialect.ProcessSucceeded && b.State == dialect.ProcessFailed
		})
		time.Sleep(300 * time.Millisecond) // give a wrongly opened stage time to run
		tasks := db.tasks(t, dialect.TaskFilter{Process: "broken"})
		states := map[int]string{}
		for _, tk := range tasks {
			states[tk.Order] = tk.State
		}
		if len(tasks) != 2 || states[100] != dialect.StateFailed || states[200] != dialect.StateBlocked {
			t.Fatalf("broken's tasks = %+v, want the failed task and a blocked stage 200", tasks)
		}
		if tasks[0].LastError != "always broken" {
			t.Errorf("last error = %q", tasks[0].LastError)
		}
		if n := len(db.logs(t, dialect.LogFilter{Process: "broken", Outcome: dialect.OutcomeFailed})); n != 2 {
			t.Errorf("%d failed attempts logged, want 2", n)
		}
	})
}

// TestSQLFailureIsLogged: SQL that fails fails the task, with the database's own
// error in Logs.
func TestSQLFailureIsLogged(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		id := db.enqueue(t, "", 1, stages.Task{Body: "SELECT * FROM no_such_table_here", MaxAttempts: 1})
		startWorkers(t, db, 1, fastConfig(), nil)
		waitFor(t, 20*time.Second, "the attempt to fail", func() bool {
			return len(db.logs(t, dialect.LogFilter{TaskID: id, Outcome: dialect.OutcomeFailed})) == 1
		})
		e := db.logs(t, dialect.LogFilter{TaskID: id})[0]
		if !containsFold(e.Error, "no_such_table_here") {
			t.Errorf("logged error %q does not carry the database's message", e.Error)
		}
	})
}

// TestGracefulShutdown: stopping a worker lets short tasks finish, and releases
// a task still running after the grace period so another worker takes it at
// once, without counting the attempt.
func TestGracefulShutdown(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		id := db.enqueue(t, "", 1, stages.Task{Kind: "slow", Body: "x", MaxAttempts: 1})
		started := make(chan struct{}, 1)
		cfg := fastConfig()
		cfg.ShutdownGrace = 200 * time.Millisecond
		pool := startWorkers(t, db, 1, cfg, func(w *queue.Worker) {
			w.Handle("slow", func(ctx context.Context, task *queue.Task) error {
				started <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			})
		})
		<-started
		pool.stop()
		entries := db.logs(t, dialect.LogFilter{TaskID: id})
		if len(entries) != 1 || entries[0].Outcome != dialect.OutcomeReleased {
			t.Fatalf("logs = %+v, want one released attempt", entries)
		}
		// max_attempts is 1: had the released attempt counted, the task could not run again.
		startWorkers(t, db, 1, fastConfig(), func(w *queue.Worker) {
			w.Handle("slow", func(context.Context, *queue.Task) error { return nil })
		})
		db.waitSucceeded(t, 10*time.Second, "another worker to run the released task", id)
		workers := db.count(t, map[string]string{
			"sqlite":    "SELECT count(*) FROM stageq_workers WHERE stopped_at IS NOT NULL",
			"postgres":  "SELECT count(*) FROM stageq.workers WHERE stopped_at IS NOT NULL",
			"sqlserver": "SELECT count(*) FROM stageq.Workers WHERE stopped_at IS NOT NULL",
		}[db.Dialect])
		if workers < 1 {
			t.Error("the stopped worker is not marked stopped in Workers")
		}
	})
}
