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
// slots (queue/capacity.go); never more than its concurrency run at once. When
// the bodies ahead of the buffer turn long (a stage of slow tasks after many
// quick ones), the buffer is handed back within bufferMaxWait (1 s) and
// another worker runs those tasks while the first one's bodies still run,
// without losing an attempt.
func TestPrefetchBuffer(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		const concurrency, fast, slow = 2, 40, 30
		p := stages.Plan{Process: "prefetch", Stages: []stages.Stage{
			{Order: new(100), Tasks: repeatTask(stages.Task{Kind: "fast", Body: "x"}, fast)},
			// Behind the fast stage, so they are claimed once the worker has seen
			// 40 short bodies and prefetches.
			{Order: new(200), Tasks: repeatTask(stages.Task{Kind: "slow", Body: "x", MaxAttempts: 1}, slow)},
		}}
		db.submit(t, p)

		var running, most atomic.Int32
		release := make(chan struct{})
		var releaseOnce sync.Once
		defer releaseOnce.Do(func() { close(release) })
		cfg := fastConfig()
		cfg.Concurrency = concurrency
		first := startWorkers(t, db, 1, cfg, func(w *queue.Worker) {
			w.Handle("fast", func(context.Context, *queue.Task) error { return nil })
			w.Handle("slow", func(ctx context.Context, _ *queue.Task) error {
				n := running.Add(1)
				defer running.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		})
		waitFor(t, 20*time.Second, "the slow stage to fill the first worker", func() bool {
			return running.Load() == concurrency
		})

		// A second worker takes what the first hands back; the first one's
		// two bodies go on running meanwhile.
		startWorkers(t, db, 1, fastConfig(), func(w *queue.Worker) {
			w.Handle("slow", func(context.Context, *queue.Task) error { return nil })
		})
		waitFor(t, 20*time.Second, "every other slow task to succeed on the second worker", func() bool {
			return countOutcome(db.logs(t, dialect.LogFilter{Process: "prefetch"}), dialect.OutcomeSucceeded) == fast+slow-concurrency
		})
		if n := running.Load(); n != concurrency {
			t.Fatalf("%d slow bodies running on the first worker, want %d still blocked", n, concurrency)
		}
		released := 0
		for _, e := range db.logs(t, dialect.LogFilter{Process: "prefetch", Outcome: dialect.OutcomeReleased}) {
			released++
			if e.Kind != "slow" || !strings.Contains(e.Error, "prefetch buffer") {
				t.Errorf("released attempt %+v: want a slow task handed back from the prefetch buffer", e)
			}
		}
		if released == 0 {
			t.Fatal("no attempt was handed back: the first worker prefetched nothing")
		}
		releaseOnce.Do(func() { close(release) })
		first.stop()
		if m := most.Load(); m > concurrency {
			t.Fatalf("%d slow bodies ran at once on a worker of concurrency %d", m, concurrency)
		}
		// max_attempts is 1: had a handed-back attempt counted, its task could
		// not have run again.
		if n := countOutcome(db.logs(t, dialect.LogFilter{Process: "prefetch"}), dialect.OutcomeSucceeded); n != fast+slow {
			t.Fatalf("%d tasks succeeded, want %d", n, fast+slow)
		}
	})
}

func repeatTask(t stages.Task, n int) []stages.Task {
	out := make([]stages.Task, n)
	for i := range out {
		out[i] = t
	}
	return out
}
