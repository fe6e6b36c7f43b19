package queue_test

import (
	"context"
	"errors"
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
	w, err := queue.NewWorker(c, queue.WorkerConfig{PollMin: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); <-done }()

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
