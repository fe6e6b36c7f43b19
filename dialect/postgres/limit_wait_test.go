package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// Claims under a limit wait for each other (routines version 11,
// stageq.limit_lock). Before, a claim that found a limit's row held by
// another claim took the limit for full and claimed none of its tasks: of
// workers woken together by one submission, one got tasks and the others
// slept a whole poll (three workers of two slots under a limit of 6 took
// 8 s to start 6 tasks of one submission; 0.02 s since).

// limitTasks submits tasks of kind "k"+key under limit key, one process per
// call (process key), and sets the limit to max.
func limitTasks(t *testing.T, d dialect.Dialect, key string, n, max int) {
	t.Helper()
	execSQL(t, d, `INSERT INTO stageq.limits (key, max_running) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET max_running = EXCLUDED.max_running`, key, max)
	tasks := make([]dialect.NewTask, n)
	for i := range tasks {
		tasks[i] = dialect.NewTask{Order: 1, Kind: "k" + key, Body: "{}", MaxAttempts: 1, LimitKey: key}
	}
	if _, err := d.Submit(context.Background(), nil, dialect.SubmitParams{Process: key, Tasks: tasks}); err != nil {
		t.Fatal(err)
	}
}

// holdClaim claims in a transaction left open, as a claim is while it counts:
// it holds the rows of the limits it admitted under.
func holdClaim(t *testing.T, d dialect.Dialect, max int, kind string) (commit func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	ns := d.Schema().Routines.Namespace()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+ns+`.claim($1, 'holder', 1, 60000, ARRAY[$2])`, max, kind).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != max {
		t.Fatalf("held claim: %d tasks; want %d", n, max)
	}
	return func() {
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// waitLonger raises the claim's 100 ms bound on a limit wait, so that a test
// sees the claim waiting before it lets the holder commit.
func waitLonger(t *testing.T, d dialect.Dialect) {
	execSQL(t, d, `ALTER FUNCTION `+d.Schema().Routines.Namespace()+`.limit_wait(text) SET lock_timeout TO '60s'`)
}

func claimIn(ctx context.Context, d dialect.Dialect, worker string, max int) <-chan []dialect.ClaimedTask {
	out := make(chan []dialect.ClaimedTask, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		got, err := d.TaskClaim(cctx, dialect.ClaimParams{WorkerID: worker, Max: max, Token: 2, Lease: time.Minute})
		if err != nil {
			got = nil
		}
		out <- got
	}()
	return out
}

func waitingOnALock(t *testing.T, d dialect.Dialect) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := d.DB().QueryRow(`SELECT count(*) FROM pg_stat_activity
 WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no claim waits for the held limit")
		}
	}
}

// TestClaimWaitsForAClaimUnderTheSameLimit: a claim holds limit L's row with
// 2 of its 4 slots taken when a second claim asks for 4 tasks. The second
// waits, and once the first commits it counts the first's tasks and takes
// the 2 slots left.
func TestClaimWaitsForAClaimUnderTheSameLimit(t *testing.T) {
	d := migratedDB(t)
	limitTasks(t, d, "L", 6, 4)
	waitLonger(t, d)
	commit := holdClaim(t, d, 2, "kL")
	second := claimIn(context.Background(), d, "second", 4)
	waitingOnALock(t, d)
	commit()
	if got := <-second; len(got) != 2 {
		t.Fatalf("second claim: %d tasks; want the 2 slots the first left", len(got))
	}
}

// TestClaimHoldingALimitDoesNotWait: a claim that already holds a limit's
// row passes by another limit's held row instead of waiting for it, so two
// claims can never wait for each other. The second claim admits a task under
// B (its first candidate), then meets A, held by the first claim: it takes
// the task under B and returns, with the first still open.
func TestClaimHoldingALimitDoesNotWait(t *testing.T) {
	d := migratedDB(t)
	limitTasks(t, d, "B", 1, 5)
	limitTasks(t, d, "A", 2, 5)
	waitLonger(t, d)
	commit := holdClaim(t, d, 1, "kA")
	defer commit()
	got := <-claimIn(context.Background(), d, "second", 10)
	if len(got) != 1 || got[0].Kind != "kB" {
		t.Fatalf("second claim: %+v; want the task under B alone, at once", got)
	}
}
