package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// benchClaims measures one claim of one task; the task is released outside the
// timer so the queue stays the same size.
func benchClaims(b *testing.B, d dialect.Dialect) {
	ctx := context.Background()
	execSQL(b, d, "ANALYZE")
	b.ResetTimer()
	for i := range b.N {
		got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "bench", Max: 1, Token: int64(i + 1), Lease: time.Minute})
		if err != nil || len(got) != 1 {
			b.Fatalf("claim: %v, %v", got, err)
		}
		b.StopTimer()
		if err := d.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: got[0].ID, Token: got[0].Token, Outcome: dialect.OutcomeReleased}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkClaimProcesses: claim latency with 10 and with 10,000 runnable
// processes (20 available tasks each), plus 10,000 idle processes.
func BenchmarkClaimProcesses(b *testing.B) {
	for _, n := range []int{10, 10_000} {
		b.Run(fmt.Sprintf("runnable=%d", n), func(b *testing.B) {
			d := migratedDB(b)
			addRunnable(b, d, n, 20)
			execSQL(b, d, `INSERT INTO stageq.processes (name, state) SELECT 'idle' || g, 'succeeded' FROM generate_series(1, 10000) g`)
			benchClaims(b, d)
		})
	}
}

// BenchmarkClaimBlockedMillion: 1,000,000 tasks blocked behind a running stage
// of one process must not slow the claims of ten other processes.
func BenchmarkClaimBlockedMillion(b *testing.B) {
	d := migratedDB(b)
	addRunnable(b, d, 10, 20)
	execSQL(b, d, `INSERT INTO stageq.processes (name, current_order) VALUES ('huge', 100)`)
	execSQL(b, d, `
INSERT INTO stageq.tasks (process_id, execution_order, body, state, worker_id, lease_token, lease_expires_at, attempt)
SELECT id, 100, 'SELECT pg_sleep(3600)', 'running', 'elsewhere', 1, now() + interval '1 day', 1
  FROM stageq.processes WHERE name = 'huge'`)
	execSQL(b, d, `
INSERT INTO stageq.tasks (process_id, execution_order, body, state)
SELECT p.id, 200, 'SELECT 1', 'blocked' FROM stageq.processes p, generate_series(1, 1000000) g
 WHERE p.name = 'huge'`)
	benchClaims(b, d)
}

// BenchmarkClaimUnderALimit: the gated claim (claim_gated), each task under
// a limit key and its kind under a kind limit, neither full.
func BenchmarkClaimUnderALimit(b *testing.B) {
	d := migratedDB(b)
	addRunnable(b, d, 10, 20)
	execSQL(b, d, `UPDATE stageq.tasks SET limit_key = 'L'`)
	execSQL(b, d, `INSERT INTO stageq.limits (key, max_running) VALUES ('L', 1000), ('kind:sql', 1000)`)
	benchClaims(b, d)
}
