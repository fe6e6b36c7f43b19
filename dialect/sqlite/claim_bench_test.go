package sqlite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// BenchmarkClaimBesideDelayedTasks: submit, claim and finish one task while
// none, or 50,000 tasks of 50 processes, wait for a run_at an hour ahead (a
// retry storm backing off). Their turns come before the new task's, so a claim
// that walks them (schema version 14) pays for every one; version 15 keeps
// them out of the claim's index, and the two cost the same.
func BenchmarkClaimBesideDelayedTasks(b *testing.B) {
	for _, delayed := range []int{0, 50} {
		b.Run(fmt.Sprintf("delayed=%d", delayed*1000), func(b *testing.B) { benchClaimBesideDelayed(b, delayed) })
	}
}

func benchClaimBesideDelayed(b *testing.B, processes int) {
	ctx := context.Background()
	d := migrated(b)
	for p := range processes {
		tasks := make([]dialect.NewTask, 1000)
		for i := range tasks {
			tasks[i] = dialect.NewTask{Order: 100, Kind: "sql", Body: "SELECT 1", MaxAttempts: 3, Delay: time.Hour}
		}
		if _, err := d.Submit(ctx, nil, dialect.SubmitParams{Process: fmt.Sprintf("delayed-%d", p), Tasks: tasks}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		res, err := d.Submit(ctx, nil, dialect.SubmitParams{Process: "now", Tasks: []dialect.NewTask{{Order: 100, Kind: "sql", Body: "SELECT 1", MaxAttempts: 3}}})
		if err != nil {
			b.Fatal(err)
		}
		got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w", Max: 1, Token: int64(i + 1), Lease: time.Minute})
		if err != nil || len(got) != 1 || got[0].ID != res.TaskIDs[0] {
			b.Fatalf("claim: %v, %v; want task %d", got, err, res.TaskIDs[0])
		}
		if err := d.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: got[0].ID, Token: got[0].Token, ProcessID: got[0].ProcessID, Outcome: dialect.OutcomeSucceeded}); err != nil {
			b.Fatal(err)
		}
	}
}
