package conformance

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// More forced interleavings (see interleave_test.go): one side holds its
// transaction open at the point where the two race, and the other runs
// against it.

// waitingOnLock waits, on PostgreSQL, until a session of the test database
// waits on a lock (the racing statement has reached the held row); elsewhere
// it gives the statement a moment to get there.
func waitingOnLock(t *testing.T, db *testDB) {
	t.Helper()
	if db.Dialect != "postgres" {
		time.Sleep(200 * time.Millisecond)
		return
	}
	waitFor(t, 10*time.Second, "a session to wait on the held lock", func() bool {
		return db.count(t, `SELECT count(*) FROM pg_stat_activity
 WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	})
}

// TestClaimSkipsAnOpenSubmission: an application's submission is open (its
// tasks inserted, not committed) when a worker claims. The claim neither
// waits for it nor returns its tasks; it takes what is committed, and the
// submission's tasks once it commits.
func TestClaimSkipsAnOpenSubmission(t *testing.T) {
	forEachDialectBut(t, "sqlite", "SQLite has one writer at a time: a claim waits for the open submission by design", func(t *testing.T, db *testDB) {
		ctx := context.Background()
		db.submit(t, plan("committed", "work", []int{1}, sameBody("x"), 1))
		tx := db.holdSubmission(t, plan("open", "work", []int{1}, sameBody("y"), 3))
		defer tx.Rollback()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		got, err := db.D.TaskClaim(cctx, dialect.ClaimParams{WorkerID: "w", Max: 10, Token: 1, Lease: time.Minute})
		if err != nil {
			t.Fatalf("claim beside an open submission: %v (it must not wait for it)", err)
		}
		if len(got) != 1 || got[0].Process != "committed" {
			t.Fatalf("claim beside an open submission took %+v; want the one committed task", got)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		got = claimAll(t, db, 2, 3)
		for _, c := range got {
			if c.Process != "open" {
				t.Errorf("after the commit the claim took %+v; want the submission's tasks", c)
			}
		}
	})
}

// TestFinishAndRescueRace: an attempt's lease has expired, and its worker's
// completion is in flight (its transaction open) when another worker's rescue
// pass runs. Whichever commits first decides; the task is never both done and
// run again. Completion first: the rescue finds nothing to do, and Logs holds
// one succeeded run. Rescue first: the completion gets ErrLeaseLost and
// changes nothing, and Logs holds the abandoned run.
//
// What the first half forces differs by dialect: on PostgreSQL the rescue is
// seen waiting on the completion's row lock (waitingOnLock) and must give up
// the task once the completion commits; SQL Server's rescue is expected to
// read past the locked row (READPAST) and return at once (unverified: not run
// on a SQL Server), which the test accepts as long as it frees nothing; SQLite has one writer, so the rescue runs after the commit.
func TestFinishAndRescueRace(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		db.skipOnBabelfish(t, "no claim or rescue there (harness_test.go)")
		ctx := context.Background()
		expired := func(process string) dialect.ClaimedTask {
			t.Helper()
			db.submit(t, plan(process, "work", []int{1}, sameBody("x"), 1))
			got, err := db.D.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "late", Max: 1, Token: 7, Lease: 200 * time.Millisecond})
			if err != nil || len(got) != 1 {
				t.Fatalf("claim: %+v, %v", got, err)
			}
			time.Sleep(400 * time.Millisecond) // the lease runs out
			return got[0]
		}
		outcomes := func(process string) []dialect.Outcome {
			var out []dialect.Outcome
			for _, e := range db.logs(t, dialect.LogFilter{Process: process}) {
				out = append(out, e.Outcome)
			}
			return out
		}

		// Completion first: it holds the task while the rescue runs.
		first := expired("finish-first")
		tx, err := db.D.BeginTx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := db.D.TaskFinish(ctx, tx, dialect.FinishParams{TaskID: first.ID, Token: first.Token, Outcome: dialect.OutcomeSucceeded}); err != nil {
			t.Fatalf("finish under an expired lease nobody rescued yet: %v", err)
		}
		rescued := make(chan int, 1)
		rescueErr := make(chan error, 1)
		go func() {
			n, err := db.D.TaskRescueExpired(ctx, dialect.RescueParams{Max: 10})
			rescued <- n
			rescueErr <- err
		}()
		waitingOnLock(t, db)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if n, err := <-rescued, <-rescueErr; err != nil || n != 0 {
			t.Fatalf("rescue beside the committed completion: %d rescued, %v; want 0", n, err)
		}
		if got := outcomes("finish-first"); len(got) != 1 || got[0] != dialect.OutcomeSucceeded {
			t.Fatalf("Logs of the completed task: %v; want one succeeded run", got)
		}

		// Rescue first: the late completion changes nothing.
		second := expired("rescue-first")
		db.waitRescue(t, "the rescue to free the task")
		err = db.D.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: second.ID, Token: second.Token, Outcome: dialect.OutcomeSucceeded})
		if !errors.Is(err, dialect.ErrLeaseLost) {
			t.Fatalf("completion after the rescue: %v; want ErrLeaseLost", err)
		}
		if got := outcomes("rescue-first"); len(got) != 1 || got[0] != dialect.OutcomeAbandoned {
			t.Fatalf("Logs of the rescued task: %v; want one abandoned run", got)
		}
	})
}

// TestLimitChangeDuringClaim: a limit is lowered (3 to 1) by a transaction
// still open when a worker claims. The claim waits for it and then admits
// under the new value, one task, not three: on PostgreSQL a claim that holds
// no limit row yet waits for a limit's row (stageq.slot_check), as it must
// when the holder is another claim of workers woken together; SQLite has one
// writer, so there the claim runs after the change commits. On PostgreSQL the
// wait is bounded: a row held past it is passed by, and the claim takes none
// of its tasks without an error.
func TestLimitChangeDuringClaim(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		var lower string
		switch db.Dialect {
		case "postgres":
			lower = `UPDATE stageq.limits SET max_running = 1 WHERE key = 'c-limit'`
		case "sqlite":
			lower = `UPDATE stageq_limits SET max_running = 1 WHERE key = 'c-limit'`
		default:
			t.Skipf("the test's own statement that holds the limit row is written for PostgreSQL and SQLite")
		}
		ctx := context.Background()
		db.setLimit(t, "c-limit", 3)
		p := plan("limited", "work", []int{1}, sameBody("x"), 4)
		p.Stages[0].Limit = "c-limit"
		db.submit(t, p)
		hold := func() *sql.Tx {
			tx, err := db.D.BeginTx(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tx.Rollback() })
			if _, err := tx.ExecContext(ctx, lower); err != nil {
				t.Fatal(err)
			}
			return tx
		}
		claim := func(token int64) (int, error) {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			got, err := db.D.TaskClaim(cctx, dialect.ClaimParams{WorkerID: "w", Max: 10, Token: token, Lease: time.Minute})
			return len(got), err
		}
		if db.Dialect == "postgres" {
			tx := hold()
			n, err := claim(1)
			if err != nil || n != 0 {
				t.Fatalf("claim while the limit row is held past the wait: %d tasks, %v; want none and no error", n, err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			// The bound is 50 ms; the interleaving below needs the claim to
			// be seen waiting before the change commits.
			db.exec(t, `ALTER FUNCTION `+db.routine("slot_max")+`(bigint, text, boolean) SET lock_timeout TO '60s'`)
		}
		tx := hold()
		got := make(chan int, 1)
		go func() { n, _ := claim(2); got <- n }()
		waitingOnLock(t, db)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if n := <-got; n != 1 {
			t.Fatalf("the claim that waited for the change took %d tasks; want 1 (the new limit)", n)
		}
		if n, err := claim(3); err != nil || n != 0 {
			t.Fatalf("claim with the lowered limit full: %d tasks, %v; want none", n, err)
		}
	})
}
