package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/stages"
)

// TestBodySessionFence pins what the rescue of a dead worker's SQL body relies
// on (dialects whose bodies run in a database session of their own): a body,
// once started, is findable under its attempt (PostgreSQL: body_backend in the routines,
// by the tag its text starts with), and a body whose lease was rescued before it started is not
// started at all — the interleaving "the lease expires and another worker's
// rescue frees the task, then the late worker starts the body" is forced here
// step by step.
func TestBodySessionFence(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		bs, ok := db.D.(dialect.BodySessioner)
		if !ok {
			t.Skipf("%s runs SQL bodies in the worker process: no body session", db.Dialect)
		}
		db.skipOnBabelfish(t, "no claim or rescue there (harness_test.go)")
		ctx := context.Background()
		id := db.enqueue(t, "fence", 100, stages.Task{Body: "SELECT 1"})

		// The first attempt starts its body: the session is named after it.
		got, err := db.D.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "late", Max: 1, Token: 11, Lease: 300 * time.Millisecond})
		if err != nil || len(got) != 1 || got[0].ID != id {
			t.Fatalf("claim = %+v, %v", got, err)
		}
		conn, text, err := bs.BodyConn(ctx, dialect.BodyStart{Lease: dialect.TaskLease{ID: id, Token: 11}, Body: db.sleepSQL(30)})
		if err != nil {
			t.Fatalf("body connection of a running attempt: %v", err)
		}
		if db.Dialect == "postgres" {
			// While the body runs, the rescue finds its backend; once it has
			// ended, it finds none (an idle session runs nothing).
			bctx, stopBody := context.WithCancel(ctx)
			ran := make(chan error, 1)
			go func() { _, err := conn.ExecContext(bctx, text); ran <- err }()
			find := fmt.Sprintf("SELECT count(*) FROM %s(%d, 11) b WHERE b IS NOT NULL", db.routine("body_backend"), id)
			waitFor(t, 10*time.Second, "the rescue's look-up to find the running body", func() bool { return db.count(t, find) == 1 })
			if n := db.count(t, fmt.Sprintf("SELECT count(*) FROM %s(%d, 1) b WHERE b IS NOT NULL", db.routine("body_backend"), id)); n != 0 {
				t.Errorf("the body was found under lease 1 (a prefix of its tag's token 11)")
			}
			stopBody() // the server cancels the statement a moment later
			<-ran
			waitFor(t, 10*time.Second, "the cancelled body to be found no more", func() bool { return db.count(t, find) == 0 })
		}
		conn.Close()

		// The lease lapses and a rescue frees the task before the late worker
		// gets to its next body: that body must not start.
		db.waitRescue(t, "the rescue to free the task")
		for _, atomic := range []bool{false, true} {
			conn, _, err = bs.BodyConn(ctx, dialect.BodyStart{Lease: dialect.TaskLease{ID: id, Token: 11}, Body: "SELECT 1",
				Atomic: atomic, LeaseHeld: func() bool { return false }})
			if err == nil {
				conn.Close()
				t.Fatalf("a body (atomic: %v) started under a lease the rescue had already freed", atomic)
			}
			if !errors.Is(err, dialect.ErrLeaseLost) {
				t.Fatalf("body connection (atomic: %v) after the rescue: %v, want ErrLeaseLost", atomic, err)
			}
		}

		// The task's next attempt gets its own session.
		got, err = db.D.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "next", Max: 1, Token: 12, Lease: time.Minute})
		if err != nil || len(got) != 1 || got[0].ID != id {
			t.Fatalf("second claim = %+v, %v", got, err)
		}
		conn, text, err = bs.BodyConn(ctx, dialect.BodyStart{Lease: dialect.TaskLease{ID: id, Token: 12}, Body: "SELECT 1", Atomic: true})
		if err != nil {
			t.Fatalf("body connection of the second attempt: %v", err)
		}
		if db.Dialect == "postgres" {
			// An atomic body's transaction goes on after the body, into the
			// statement recording its end, which carries no mark: the session
			// is still found there, and while it sits idle in the transaction
			// (a worker frozen before COMMIT holds the task's row).
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, text); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, "SELECT 2"); err != nil {
				t.Fatal(err)
			}
			if n := db.count(t, fmt.Sprintf("SELECT count(*) FROM %s(%d, 12) b WHERE b IS NOT NULL", db.routine("body_backend"), id)); n != 1 {
				t.Errorf("an atomic body's session idle in its transaction was not found")
			}
			tx.Rollback()
		}
		conn.Close()

		// A worker that vouches for the lease (claimed moments ago) starts the
		// body without a read of it: the dialect trusts it, even here, where
		// the lease is in fact held by the second attempt.
		conn, _, err = bs.BodyConn(ctx, dialect.BodyStart{Lease: dialect.TaskLease{ID: id, Token: 11}, Body: "SELECT 1",
			LeaseHeld: func() bool { return true }})
		switch {
		case db.Dialect == "postgres" && err != nil:
			t.Errorf("a body the worker vouched for did not start: %v", err)
		case db.Dialect != "postgres" && !errors.Is(err, dialect.ErrLeaseLost):
			// SQL Server records the session in every case, and so reads the lease
			// (as written; not run on a SQL Server).
			t.Errorf("body connection of a lost lease: %v, want ErrLeaseLost", err)
		}
		if err == nil {
			conn.Close()
		}
	})
}

// TestFailedAtomicBodyLeavesNoNamedSession (PostgreSQL): an atomic body names
// its session after its attempt, and the name stays on the connection. When
// the body's transaction does not commit, the attempt's end is recorded in
// another transaction, if at all; should it never be, the rescue would look
// for the name and end whatever body the connection ran next. So the worker
// does not keep such a connection: once the failed attempt is recorded, no
// session bears its name.
func TestFailedAtomicBodyLeavesNoNamedSession(t *testing.T) {
	db := newTestDB(t, newPostgresDB(t))
	atomic := true
	id := db.enqueue(t, "atomic-fail", 1, stages.Task{Body: "SELECT 1/0", Atomic: &atomic, MaxAttempts: 1})
	startWorkers(t, db, 1, fastConfig(), nil)
	waitFor(t, 30*time.Second, "the atomic task to fail", func() bool {
		return len(db.logs(t, dialect.LogFilter{Process: "atomic-fail", Outcome: dialect.OutcomeFailed})) == 1
	})
	named := fmt.Sprintf("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'stageq task %d lease %%'", id)
	waitFor(t, 10*time.Second, "the failed attempt's named session to be closed", func() bool { return db.count(t, named) == 0 })
}
