package queue_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/lease"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// TestHandleRefusesKindsNoTaskCanCarry: reserved, empty, over-long kinds and
// kinds no dialect stores (a NUL byte, invalid UTF-8) are refused when
// registered, before any claim passes them to the database.
func TestHandleRefusesKindsNoTaskCanCarry(t *testing.T) {
	_, c := openSQLite(t)
	w, err := queue.NewWorker(c, queue.WorkerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, *queue.Task) error { return nil }
	for _, kind := range []string{"", queue.KindSQL, queue.KindExec, strings.Repeat("k", 201), "re\x00port", "re\xffport"} {
		if err := w.Handle(kind, h); err == nil {
			t.Errorf("Handle(%.20q…) accepted", kind)
		}
	}
	if err := w.Handle(strings.Repeat("k", 200), h); err != nil {
		t.Errorf("a 200-character kind: %v", err)
	}
	if got := len(w.Kinds()); got != 2 {
		t.Errorf("kinds %v, want sql and the 200-character one", w.Kinds())
	}
}

// TestHandlerErrorWrappingErrLeaseLostIsTheTasksFailure: a handler guarding
// its work with a lease of its own (package lease) and returning lease.ErrLost,
// which is dialect.ErrLeaseLost, failed the task; it did not lose the task's
// lease. Before, the worker took it for its own lease lost and recorded
// nothing: the attempt stayed running until its lease expired, and the rescue
// ran the task again despite NoRetry.
func TestHandlerErrorWrappingErrLeaseLostIsTheTasksFailure(t *testing.T) {
	ctx, c := openSQLite(t)
	if _, err := c.Enqueue(ctx, "", 1, stages.Task{Kind: "report", Body: "x", MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	logs := runUntilIdle(t, c, queue.WorkerConfig{Lease: time.Minute}, func(w *queue.Worker) {
		if err := w.Handle("report", func(context.Context, *queue.Task) error {
			calls.Add(1)
			return queue.NoRetry(fmt.Errorf("nightly report: %w", lease.ErrLost))
		}); err != nil {
			t.Fatal(err)
		}
	})
	if len(logs) != 1 || logs[0].Outcome != dialect.OutcomeFailed || !strings.Contains(logs[0].Error, "nightly report") ||
		logs[0].RetryAt != nil {
		t.Fatalf("Logs: %+v; want one failed attempt with the handler's error and no retry (NoRetry)", logs)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times; want once", n)
	}
}

// TestShutdownLeavesAHandlerThatIgnoresItsCancel: a Handler that does not
// return when the shutdown cancels it cannot be stopped from outside. Run
// waited for it for ever, extending its lease all the while. Now Run gives it
// a lease more, then returns an error saying so and stops extending the
// lease: another worker's rescue runs the task once the lease expires, and
// what the stuck attempt returns at last is not recorded over that.
func TestShutdownLeavesAHandlerThatIgnoresItsCancel(t *testing.T) {
	ctx, c := openSQLite(t)
	if _, err := c.Enqueue(ctx, "", 1, stages.Task{Kind: "report", Body: "x"}); err != nil {
		t.Fatal(err)
	}
	started, unstick := make(chan struct{}), make(chan struct{})
	stuck, stop, ran := startWorker(t, c, queue.WorkerConfig{ID: "stuck", Lease: time.Second, ShutdownGrace: 50 * time.Millisecond},
		"report", func(context.Context, *queue.Task) error {
			close(started)
			<-unstick // ignores its context
			return nil
		})
	<-started
	stop()
	select {
	case err := <-ran:
		if err == nil || !strings.Contains(err.Error(), "left to lapse") {
			t.Fatalf("Run: %v; want an error saying the task was left to lapse", err)
		}
	case <-time.After(time.Minute): // a guard against the old hang, not a measure
		close(unstick)
		t.Fatal("Run did not return while a handler ignored its cancel")
	}

	// Its lease is no longer extended: a second worker rescues the task and runs it.
	var second atomic.Int32
	ranSecond := make(chan struct{})
	_, stop2, ran2 := startWorker(t, c, queue.WorkerConfig{ID: "second", Lease: time.Second},
		"report", func(context.Context, *queue.Task) error {
			if second.Add(1) == 1 {
				close(ranSecond)
			}
			return nil
		})
	select {
	case <-ranSecond:
	case <-time.After(time.Minute): // a guard, not a measure
		t.Error("no other worker ran the task: its lease was still extended")
	}
	stop2()
	if err := <-ran2; err != nil {
		t.Fatal(err)
	}
	logs, err := c.Logs(ctx, dialect.LogFilter{})
	if err != nil {
		t.Fatal(err)
	}
	close(unstick) // the stuck attempt returns nil now, too late
	if second.Load() != 1 {
		t.Fatalf("the second worker ran the task %d times; want once (Logs %+v)", second.Load(), logs)
	}
	var outcomes []string
	for _, l := range logs {
		outcomes = append(outcomes, l.WorkerID+":"+string(l.Outcome))
	}
	if want := []string{"stuck:abandoned", "second:succeeded"}; !slices.Equal(outcomes, want) {
		t.Fatalf("Logs %v; want %v", outcomes, want)
	}
	// The stuck attempt's late nil is refused (its lease is gone), and the
	// worker's goroutines that record ends wind up after it, without a panic
	// on the channels Run would have closed under it.
	select {
	case <-queue.WrappedUp(stuck):
	case <-time.After(time.Minute): // a guard, not a measure
		t.Fatal("the worker's recording goroutines did not stop after the stuck attempt ended")
	}
	if logs, err = c.Logs(ctx, dialect.LogFilter{}); err != nil {
		t.Fatal(err)
	}
	if len(logs) != 2 || logs[1].Outcome != dialect.OutcomeSucceeded || logs[1].WorkerID != "second" {
		t.Fatalf("after the stuck attempt returned, Logs %+v", logs)
	}
}

// startWorker runs a worker on c (cfg, polling quickly, no scheduler) with h
// for kind, until stop; ran receives what Run returned.
func startWorker(t *testing.T, c *queue.Client, cfg queue.WorkerConfig, kind string, h queue.Handler) (w *queue.Worker, stop context.CancelFunc, ran <-chan error) {
	t.Helper()
	cfg.PollMin, cfg.NoScheduler = 10*time.Millisecond, true
	w, err := queue.NewWorker(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Handle(kind, h); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	out := make(chan error, 1)
	go func() { out <- w.Run(ctx) }()
	return w, stop, out
}
