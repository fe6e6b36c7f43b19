package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
)

// Per-dialect micro-benchmarks for benchstat:
//
//	go test -run '^$' -bench . -count 10 ./bench/ > old.txt   # then new.txt
//	benchstat old.txt new.txt
//
// PostgreSQL cases use STAGEQ_POSTGRES_DSN (default the local test server) and
// are skipped when it cannot be reached; each case gets a database of its own.

// dialects are the sub-benchmarks every benchmark runs.
var benchDialects = []string{"sqlite", "postgres"}

// benchClient creates a migrated database for one benchmark on the dialect.
func benchClient(b *testing.B, name string) (string, *queue.Client) {
	b.Helper()
	ctx := context.Background()
	dsn := ""
	if name == "postgres" {
		dsn = os.Getenv("STAGEQ_POSTGRES_DSN")
		if dsn == "" {
			dsn = NewConfig().PostgresDSN
		}
	}
	t, err := openTarget(ctx, name, dsn)
	if err != nil {
		b.Skipf("%s unavailable: %v", name, err)
	}
	b.Cleanup(t.close)
	dsn, c, drop, err := t.migrated(ctx, "micro")
	if err != nil {
		b.Skipf("%s unavailable: %v", name, err)
	}
	b.Cleanup(drop)
	return dsn, c
}

// eachDialect runs fn as a sub-benchmark per dialect, on a migrated database
// of its own (at dsn, open as c); a dialect that cannot be reached is skipped.
func eachDialect(b *testing.B, fn func(b *testing.B, dsn string, c *queue.Client)) {
	for _, name := range benchDialects {
		b.Run(name, func(b *testing.B) {
			dsn, c := benchClient(b, name)
			fn(b, dsn, c)
		})
	}
}

// BenchmarkClaimFinish: one TaskClaim of one task and its TaskFinish, with
// about 10,000 tasks pending. The queue is topped up outside the timer.
func BenchmarkClaimFinish(b *testing.B) {
	const depth = 10_000
	eachDialect(b, func(b *testing.B, _ string, c *queue.Client) {
		ctx := context.Background()
		d := c.Dialect()
		sr, err := c.Submit(ctx, onePlan("micro", kindNoop, "noop", 1))
		if err != nil {
			b.Fatal(err)
		}
		if err := fill(ctx, d, sr.ProcessID, 0, depth, dialect.StateAvailable); err != nil {
			b.Fatal(err)
		}
		left := depth
		b.ResetTimer()
		for range b.N {
			if left < depth/2 {
				b.StopTimer()
				if err := fill(ctx, d, sr.ProcessID, 0, depth/2, dialect.StateAvailable); err != nil {
					b.Fatal(err)
				}
				left += depth / 2
				b.StartTimer()
			}
			got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "micro", Max: 1, Token: rand.Int64N(1<<62) + 1, Lease: time.Minute})
			if err != nil || len(got) != 1 {
				b.Fatalf("claim: %d tasks, %v", len(got), err)
			}
			if err := d.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: got[0].ID, Token: got[0].Token, Outcome: dialect.OutcomeSucceeded}); err != nil {
				b.Fatal(err)
			}
			left--
		}
	})
}

// BenchmarkSubmit: Client.Submit of a plan of 100 tasks per op.
func BenchmarkSubmit(b *testing.B) {
	const per = 100
	eachDialect(b, func(b *testing.B, _ string, c *queue.Client) {
		ctx := context.Background()
		plan := onePlan("micro", kindNoop, "noop", per)
		b.ResetTimer()
		for range b.N {
			if _, err := c.Submit(ctx, plan); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "tasks/s")
	})
}

// BenchmarkDrain: end to end, b.N no-op tasks enqueued outside the timer, then
// drained by one worker of concurrency 16; ns/op is per task.
func BenchmarkDrain(b *testing.B) {
	eachDialect(b, func(b *testing.B, dsn string, c *queue.Client) {
		ctx := context.Background()
		process := fmt.Sprintf("drain-%d", b.N)
		if _, err := c.Submit(ctx, onePlan(process, kindNoop, "noop", b.N)); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		stop, err := startWorker(ctx, dsn, queue.WorkerConfig{Concurrency: 16}, map[string]queue.Handler{kindNoop: noopHandler})
		if err != nil {
			b.Fatal(err)
		}
		ok := waitSucceeded(ctx, c, process, time.Now().Add(10*time.Minute))
		b.StopTimer()
		if err := stop(); err != nil {
			b.Fatal(err)
		}
		if !ok {
			b.Fatal("drain did not finish in 10 minutes")
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
	})
}
