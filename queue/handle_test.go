package queue_test

import (
	"context"
	"fmt"
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
