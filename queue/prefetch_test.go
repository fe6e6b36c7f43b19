package queue_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// At shutdown, prefetched tasks that never started are handed back at once,
// not after the grace period, while the running bodies keep their grace; the
// hand-back does not count as an attempt. (The conformance suite runs the
// prefetch buffer on every dialect; this pins the shutdown, with the buffer
// held longer than its usual second.)
func TestShutdownHandsBackThePrefetchBuffer(t *testing.T) {
	defer queue.SetBufferMaxWait(time.Hour)()
	ctx, c := openSQLite(t)
	const concurrency, fast, slow = 2, 40, 30
	fastTasks, slowTasks := make([]stages.Task, fast), make([]stages.Task, slow)
	for i := range fastTasks {
		fastTasks[i] = stages.Task{Kind: "fast", Body: "x"}
	}
	for i := range slowTasks {
		slowTasks[i] = stages.Task{Kind: "slow", Body: "x", MaxAttempts: 1}
	}
	o1, o2 := 100, 200
	if _, err := c.Submit(ctx, stages.Plan{Process: "p", Stages: []stages.Stage{
		{Order: &o1, Tasks: fastTasks}, {Order: &o2, Tasks: slowTasks}}}); err != nil {
		t.Fatal(err)
	}

	var running, most atomic.Int32
	release := make(chan struct{})
	w, err := queue.NewWorker(c, queue.WorkerConfig{Concurrency: concurrency, PollMin: 10 * time.Millisecond,
		ShutdownGrace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("fast", func(context.Context, *queue.Task) error { return nil })
	w.Handle("slow", func(ctx context.Context, _ *queue.Task) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		return nil
	})
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()

	slowLogs := func() (open, released int, errs []string) {
		logs, err := c.Logs(ctx, dialect.LogFilter{Process: "p"})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range logs {
			switch {
			case e.Kind != "slow":
			case e.EndedAt == nil:
				open++
			case e.Outcome == dialect.OutcomeReleased:
				released++
				errs = append(errs, e.Error)
			}
		}
		return open, released, errs
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	wait("the slow stage to fill the worker and its buffer", func() bool {
		open, _, _ := slowLogs()
		return running.Load() == concurrency && open > concurrency
	})
	stop()
	// The buffer may have grown between the look above and stop (a claim in
	// flight): handed back means every attempt still open is a running body.
	wait("the buffer to be handed back while the two bodies still run", func() bool {
		open, released, _ := slowLogs()
		return open == concurrency && released > 0
	})
	if n := running.Load(); n != concurrency {
		t.Fatalf("%d bodies running after the hand-back, want %d (they have the grace period)", n, concurrency)
	}
	_, _, errs := slowLogs()
	for _, e := range errs {
		if e != "released at worker shutdown before it started" {
			t.Errorf("released attempt says %q", e)
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if m := most.Load(); m > concurrency {
		t.Fatalf("%d bodies ran at once on a worker of concurrency %d", m, concurrency)
	}

	w2, err := queue.NewWorker(c, queue.WorkerConfig{PollMin: 10 * time.Millisecond, ExitWhenIdle: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w2.Handle("fast", func(context.Context, *queue.Task) error { return nil })
	w2.Handle("slow", func(context.Context, *queue.Task) error { return nil })
	if err := w2.Run(ctx); err != nil {
		t.Fatal(err)
	}
	logs, err := c.Logs(ctx, dialect.LogFilter{Process: "p", Outcome: dialect.OutcomeSucceeded})
	if err != nil {
		t.Fatal(err)
	}
	if len(logs) != fast+slow {
		t.Fatalf("%d tasks succeeded, want %d: a handed-back attempt must not count against max_attempts 1", len(logs), fast+slow)
	}
}
