package conformance

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// TestPrefetchBuffer: once bodies run short, a worker claims ahead of its free
// slots (queue/capacity.go). The prefetched tasks wait in its buffer: never
// more than its concurrency run at once, their leases are kept, and at
// shutdown the ones that never started are handed back at once, not after the
// grace period, and run elsewhere without losing an attempt.
func TestPrefetchBuffer(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		const concurrency, fast, slow = 2, 40, 30
		p := stages.Plan{Process: "prefetch", Stages: []stages.Stage{
			{Order: ptr(100), Tasks: repeatTask(stages.Task{Kind: "fast", Body: "x"}, fast)},
			// Behind the fast stage, so they are claimed once the worker has seen
			// 40 short bodies and prefetches.
			{Order: ptr(200), Tasks: repeatTask(stages.Task{Kind: "slow", Body: "x", MaxAttempts: 1}, slow)},
		}}
		if _, err := db.Client.Submit(ctx, p); err != nil {
			t.Fatal(err)
		}

		var running, most atomic.Int32
		release := make(chan struct{})
		var releaseOnce sync.Once
		defer releaseOnce.Do(func() { close(release) })
		cfg := fastConfig()
		cfg.Concurrency = concurrency
		cfg.Lease = 3 * time.Second
		cfg.Heartbeat = 300 * time.Millisecond
		cfg.ShutdownGrace = time.Minute // the buffer must not wait for it
		pool := startWorkers(t, db, 1, cfg, func(w *queue.Worker) {
			w.Handle("fast", func(context.Context, *queue.Task) error { return nil })
			w.Handle("slow", func(ctx context.Context, _ *queue.Task) error {
				n := running.Add(1)
				defer running.Add(-1)
				for {
					m := most.Load()
					if n <= m || most.CompareAndSwap(m, n) {
						break
					}
				}
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		})

		slowOpen := func() (open, released int) {
			for _, e := range db.logs(t, dialect.LogFilter{Process: "prefetch"}) {
				switch {
				case e.Kind != "slow":
				case e.EndedAt == nil:
					open++
				case e.Outcome == dialect.OutcomeReleased:
					released++
				}
			}
			return open, released
		}
		waitFor(t, 20*time.Second, "the slow stage to fill the worker", func() bool {
			open, _ := slowOpen()
			return running.Load() == concurrency && open > concurrency
		})
		// Past a few heartbeats, the prefetched attempts are still this
		// worker's: their leases are extended while they wait.
		time.Sleep(cfg.Lease + time.Second)
		open, _ := slowOpen()
		if open <= concurrency {
			t.Fatalf("%d slow attempts open with %d running: nothing was prefetched, or prefetched leases lapsed", open, concurrency)
		}
		prefetched := open - concurrency

		stopped := make(chan struct{})
		go func() { pool.stop(); close(stopped) }()
		waitFor(t, 10*time.Second, "the prefetched tasks to be handed back while two still run", func() bool {
			_, released := slowOpen()
			return released == prefetched
		})
		if n := running.Load(); n != concurrency {
			t.Fatalf("%d slow bodies running while the buffer was handed back, want %d (they have the grace period)", n, concurrency)
		}
		releaseOnce.Do(func() { close(release) })
		select {
		case <-stopped:
		case <-time.After(20 * time.Second):
			t.Fatal("worker did not stop after its running tasks ended")
		}
		if m := most.Load(); m > concurrency {
			t.Fatalf("%d slow bodies ran at once on a worker of concurrency %d", m, concurrency)
		}
		for _, e := range db.logs(t, dialect.LogFilter{Process: "prefetch", Outcome: dialect.OutcomeReleased}) {
			if !strings.Contains(e.Error, "before it started") {
				t.Errorf("released attempt of task %d says %q, want that it never started", e.TaskID, e.Error)
			}
		}

		// max_attempts is 1: a handed-back attempt is not counted, so every
		// slow task still runs.
		startWorkers(t, db, 1, fastConfig(), func(w *queue.Worker) {
			w.Handle("fast", func(context.Context, *queue.Task) error { return nil })
			w.Handle("slow", func(context.Context, *queue.Task) error { return nil })
		})
		waitFor(t, 30*time.Second, "every slow task to succeed", func() bool {
			return countOutcome(db.logs(t, dialect.LogFilter{Process: "prefetch"}), dialect.OutcomeSucceeded) == fast+slow
		})
	})
}

func repeatTask(t stages.Task, n int) []stages.Task {
	out := make([]stages.Task, n)
	for i := range out {
		out[i] = t
	}
	return out
}

func ptr[T any](v T) *T { return &v }
