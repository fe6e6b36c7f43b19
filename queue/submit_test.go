package queue_test

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

// SubmitTx is the enqueue inside the caller's transaction; without one it
// refuses rather than split the submission over transactions of its own.
func TestSubmitTxNeedsATransaction(t *testing.T) {
	ctx, c := openSQLite(t)
	one := 1
	if _, err := c.SubmitTx(ctx, nil, stages.Plan{Process: "p", Stages: []stages.Stage{{Order: &one, Tasks: []stages.Task{{Body: "x"}}}}}); err == nil {
		t.Fatal("SubmitTx without a transaction succeeded")
	}
	tasks, err := c.Dialect().TaskList(ctx, dialect.TaskFilter{Process: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 0 {
		t.Errorf("SubmitTx without a transaction left %d tasks", len(tasks))
	}
}

// TestWaitReturnsTheEnd: Wait returns a process once it has ended, failed
// too (a task failed for good), refuses a name no process has, and gives
// up when its context ends first.
func TestWaitReturnsTheEnd(t *testing.T) {
	ctx, c := openSQLite(t)
	if _, err := c.Enqueue(ctx, "bad", 1, stages.Task{Body: "SELECT * FROM no_such_table", MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "later", 1, stages.Task{Kind: "nobody", Body: "x"}); err != nil {
		t.Fatal(err)
	}
	// A stage of two: one task fails for good while the other still runs.
	one := 1
	if _, err := c.Submit(ctx, stages.Plan{Process: "mixed", Stages: []stages.Stage{{Order: &one, Tasks: []stages.Task{
		{Kind: "hold", Body: "x"}, {Body: "SELECT * FROM no_such_table", MaxAttempts: 1}}}}}); err != nil {
		t.Fatal(err)
	}
	w, err := queue.NewWorker(c, queue.WorkerConfig{PollMin: 10 * time.Millisecond, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	if err := w.Handle("hold", func(context.Context, *queue.Task) error {
		close(held)
		<-release
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var releaseOnce sync.Once
	let := func() { releaseOnce.Do(func() { close(release) }) }
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { let(); stop(); <-done }()

	waited := make(chan dialect.ProcessInfo, 1)
	go func() {
		p, err := c.Wait(ctx, "mixed", 10*time.Millisecond)
		if err != nil {
			t.Errorf("Wait for mixed: %v", err)
		}
		waited <- p
	}()
	<-held
	// mixed fails as soon as its task fails for good; its other task is held.
	for {
		p, err := c.Dialect().(dialect.Operator).ProcessList(ctx, dialect.ProcessFilter{Name: "mixed"})
		if err != nil {
			t.Fatal(err)
		}
		if p[0].State == dialect.ProcessFailed {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case p := <-waited:
		t.Fatalf("Wait returned %+v while a task of the failed stage still ran", p)
	case <-time.After(100 * time.Millisecond):
	}
	let()
	if p := <-waited; p.State != dialect.ProcessFailed {
		t.Errorf("Wait for mixed: %+v; want failed, once its held task ended", p)
	}
	if l, err := c.Dialect().LogList(ctx, dialect.LogFilter{Process: "mixed", Outcome: dialect.OutcomeSucceeded}); err != nil || len(l) != 1 {
		t.Errorf("when Wait returned, mixed had %d succeeded tasks (%v); want the held one", len(l), err)
	}

	if p, err := c.Wait(ctx, "bad", 10*time.Millisecond); err != nil || p.State != dialect.ProcessFailed {
		t.Errorf("Wait for a process whose task fails: %+v, %v; want failed", p, err)
	}
	if _, err := c.Wait(ctx, "no-such-process", 0); !errors.Is(err, dialect.ErrNotFound) {
		t.Errorf("Wait for no process: %v; want ErrNotFound", err)
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if p, err := c.Wait(short, "later", 10*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) || p.State != dialect.ProcessActive {
		t.Errorf("Wait past its context: %+v, %v; want the process active and the deadline", p, err)
	}
}

// TestExitWhenIdleWaitsForWorkLeft: a batch worker (ExitWhenIdle) stays while
// a task of its kinds waits for a retry's backoff or a delay longer than its
// idle time (behind many of another kind in the list), and exits once that
// work has run; a task of a kind it does not run, or one behind a failed
// task, does not keep it.
func TestExitWhenIdleWaitsForWorkLeft(t *testing.T) {
	ctx, c := openSQLite(t)
	if _, err := c.Enqueue(ctx, "retried", 1, stages.Task{Body: "SELECT * FROM no_such_table", MaxAttempts: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "retried", 2, stages.Task{Body: "SELECT 1"}); err != nil { // behind the failure
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "z-delayed", 1, stages.Task{Body: "SELECT 1", RunAt: time.Now().Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	// Many tasks of another kind, listed before the worker's own.
	gpu := make([]stages.Task, 250)
	for i := range gpu {
		gpu[i] = stages.Task{Kind: "gpu", Body: "x", RunAt: time.Now().Add(time.Hour)}
	}
	one := 1
	if _, err := c.Submit(ctx, stages.Plan{Process: "a-gpu", Stages: []stages.Stage{{Order: &one, Tasks: gpu}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, "elsewhere", 1, stages.Task{Kind: "nobody-here", Body: "x"}); err != nil {
		t.Fatal(err)
	}
	w, err := queue.NewWorker(c, queue.WorkerConfig{PollMin: 10 * time.Millisecond, PollMax: 50 * time.Millisecond,
		ExitWhenIdle: 200 * time.Millisecond, RetryBase: time.Second, RetryMax: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not exit within 30 s")
	}
	for process, want := range map[string]int{"retried": 2, "z-delayed": 1} {
		if l, err := c.Dialect().LogList(ctx, dialect.LogFilter{Process: process}); err != nil || len(l) != want {
			t.Errorf("process %s: %d attempts (%v) when the worker exited; want %d", process, len(l), err, want)
		}
	}
}

// TestWaitForTheDefaultProcess: Wait(ctx, "", …) follows the default
// process, where Enqueue(ctx, "", …) puts its task, as Enqueue's "" means.
// It used to look up a process named "" and fail with dialect.ErrNotFound,
// though the task it was asked about was queued. Found by an API review.
func TestWaitForTheDefaultProcess(t *testing.T) {
	ctx, c := openSQLite(t)
	r, err := c.Enqueue(ctx, "", 0, stages.Task{Body: "SELECT 1"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Process != dialect.DefaultProcess {
		t.Fatalf("Enqueue to \"\" went to %q, want %q", r.Process, dialect.DefaultProcess)
	}
	w, err := queue.NewWorker(c, queue.WorkerConfig{PollMin: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	p, err := c.Wait(ctx, "", 10*time.Millisecond)
	if err != nil {
		t.Fatalf("Wait for the default process: %v", err)
	}
	if p.Name != dialect.DefaultProcess || p.State != dialect.ProcessSucceeded {
		t.Errorf("Wait returned %s %s, want %s succeeded", p.Name, p.State, dialect.DefaultProcess)
	}
}
