package postgres_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/dialect/postgres"
)

// Claims under a limit or a process's max_parallel wait for each other
// (routines version 11, stageq.slot_check). Before, a claim that found a limit's row held by
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
	submitTasks(t, d, nil, key, n, key)
}

// submitTasks submits n tasks of kind "k"+process to process, in tx (nil:
// its own), under limit key (may be "").
func submitTasks(t *testing.T, d dialect.Dialect, tx *sql.Tx, process string, n int, key string) {
	t.Helper()
	tasks := make([]dialect.NewTask, n)
	for i := range tasks {
		tasks[i] = dialect.NewTask{Order: 1, Kind: "k" + process, Body: "{}", MaxAttempts: 1, LimitKey: key}
	}
	if _, err := d.Submit(context.Background(), tx, dialect.SubmitParams{Process: process, Tasks: tasks}); err != nil {
		t.Fatal(err)
	}
}

// cappedTasks submits n tasks to process, whose max_parallel it sets to max.
func cappedTasks(t *testing.T, d dialect.Dialect, process string, n, max int) {
	t.Helper()
	submitTasks(t, d, nil, process, n, "")
	execSQL(t, d, `UPDATE stageq.processes SET max_parallel = $1 WHERE name = $2`, max, process)
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

// holdProcesses locks the processes whose name is what (`= 'C'`, `LIKE
// 'c%'`) in a transaction left open, as a pause, an application's submission
// or a claim of a capped process does.
func holdProcesses(t *testing.T, d dialect.Dialect, what string) *sql.Tx {
	t.Helper()
	tx, err := d.DB().BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	if _, err := tx.Exec(`SELECT id FROM stageq.processes WHERE name ` + what + ` FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	return tx
}

// waitLonger raises the claim's 50 ms bound on a wait for a limit's or a
// capped process's row, so that a test sees the claim waiting before it lets
// the holder commit.
func waitLonger(t *testing.T, d dialect.Dialect) {
	execSQL(t, d, `ALTER FUNCTION `+d.Schema().Routines.Namespace()+`.slot_max(bigint, text, boolean) SET lock_timeout TO '60s'`)
}

// claimIn claims up to max tasks for worker in a goroutine of its own and
// hands back what it got, or fails the test on an error.
func claimIn(ctx context.Context, t *testing.T, d dialect.Dialect, worker string, max int) <-chan []dialect.ClaimedTask {
	out := make(chan []dialect.ClaimedTask, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		got, err := d.TaskClaim(cctx, dialect.ClaimParams{WorkerID: worker, Max: max, Token: 2, Lease: time.Minute})
		if err != nil {
			t.Errorf("claim of %s: %v", worker, err)
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
			t.Fatal("no claim waits for the held row")
		}
	}
}

// TestClaimWaitsForAClaimUnderTheSameLimit: a claim holds the row of limit
// C, or of process C capped at 4, with 2 of its 4 slots taken when a second
// claim asks for 4 tasks. The second waits, and once the first commits it
// counts the first's tasks and takes the 2 slots left. It does so too where
// the database's default isolation is REPEATABLE READ, under which a count
// after the wait would read the snapshot taken before it (2 tasks running
// under a limit of 1, seen): the queue's sessions run READ COMMITTED
// (postgres.go, readCommittedSQL). And it reads its candidates again after
// the wait: with 60 tasks under a limit of 100 and 20 of them the first's,
// the 26 it read before the wait left it 6 of the 10 it asks for.
func TestClaimWaitsForAClaimUnderTheSameLimit(t *testing.T) {
	for _, c := range []struct {
		name                   string
		tasks, max             int
		held, ask, want        int
		capped, repeatableRead bool
	}{
		{name: "limit key", tasks: 6, max: 4, held: 2, ask: 4, want: 2},
		{name: "max_parallel", tasks: 6, max: 4, held: 2, ask: 4, want: 2, capped: true},
		{name: "limit key, repeatable read", tasks: 6, max: 4, held: 2, ask: 4, want: 2, repeatableRead: true},
		{name: "candidates read again", tasks: 60, max: 100, held: 20, ask: 10, want: 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			var d dialect.Dialect
			if c.repeatableRead {
				d = repeatableRead(t)
			} else {
				d = migratedDB(t)
			}
			if c.capped {
				cappedTasks(t, d, "C", c.tasks, c.max)
			} else {
				limitTasks(t, d, "C", c.tasks, c.max)
			}
			waitLonger(t, d)
			commit := holdClaim(t, d, c.held, "kC")
			second := claimIn(context.Background(), t, d, "second", c.ask)
			waitingOnALock(t, d)
			commit()
			if got := <-second; len(got) != c.want {
				t.Fatalf("second claim: %d tasks; want %d", len(got), c.want)
			}
		})
	}
}

// repeatableRead is migratedDB with REPEATABLE READ as the database's
// default isolation.
func repeatableRead(t *testing.T) dialect.Dialect {
	t.Helper()
	d, dsn := migratedDSN(t, "stageq_rr")
	var name string
	if err := d.DB().QueryRow(`SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	execSQL(t, d, `ALTER DATABASE `+name+` SET default_transaction_isolation = 'repeatable read'`)
	rr, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rr.Close() })
	return rr
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
	got := <-claimIn(context.Background(), t, d, "second", 10)
	if len(got) != 1 || got[0].Kind != "kB" {
		t.Fatalf("second claim: %+v; want the task under B alone, at once", got)
	}
}

// TestClaimPassesByACappedProcessASubmissionHolds: an application's
// submission into capped process C is open, holding C's row, past the
// claim's 50 ms bound. The claim takes another process's task and none of
// C's, and C's tasks keep their place in the fairness order (a full cap
// would move them back); once the submission commits, they are claimed.
func TestClaimPassesByACappedProcessASubmissionHolds(t *testing.T) {
	d := migratedDB(t)
	ctx := context.Background()
	cappedTasks(t, d, "C", 2, 2)
	submitTasks(t, d, nil, "other", 1, "")
	vtimes := func() (v string) {
		if err := d.DB().QueryRowContext(ctx, `SELECT array_agg(t.vtime ORDER BY t.id)::text FROM stageq.tasks t
  JOIN stageq.processes p ON p.id = t.process_id WHERE p.name = 'C' AND t.state = 'available'`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := vtimes()
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	submitTasks(t, d, tx, "C", 1, "")
	got := <-claimIn(ctx, t, d, "w", 10)
	if len(got) != 1 || got[0].Process != "other" {
		t.Fatalf("claim while C's submission is open: %+v; want the task of process other alone", got)
	}
	if after := vtimes(); after != before {
		t.Fatalf("C's tasks' virtual times moved from %v to %v: a held row is not a full cap", before, after)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := <-claimIn(ctx, t, d, "w", 10); len(got) != 2 {
		t.Fatalf("claim after the submission committed: %d tasks; want C's 2 (its cap)", len(got))
	}
}

// TestClaimTakesTheProcessRowBeforeItsTasks: a transaction holds capped
// process C's row, as a pause does, while a claim waits for that row; then
// the transaction rewrites C's waiting tasks, as a pause does. It must not
// wait for the claim: a claim locks a task only after its limits' rows, the
// order every writer keeps. (Taken task first, the two waited for each other
// until PostgreSQL's deadlock check ended one.) The claim then finds C's
// tasks blocked and takes none.
func TestClaimTakesTheProcessRowBeforeItsTasks(t *testing.T) {
	d := migratedDB(t)
	ctx := context.Background()
	cappedTasks(t, d, "C", 2, 1)
	waitLonger(t, d)
	tx := holdProcesses(t, d, `= 'C'`)
	claim := claimIn(ctx, t, d, "w", 10)
	waitingOnALock(t, d)
	uctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := tx.ExecContext(uctx, `UPDATE stageq.tasks SET state = 'blocked'
 WHERE process_id = (SELECT id FROM stageq.processes WHERE name = 'C') AND state = 'available'`); err != nil {
		t.Fatalf("the pause's rewrite of C's tasks while a claim waits for C: %v", err)
	}
	waitingOnALock(t, d) // the claim, still
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := <-claim; len(got) != 0 {
		t.Fatalf("claim: %+v; want none", got)
	}
}

// TestClaimWaitsOnce: one transaction holds the rows of 300 capped
// processes, none of them full, as an application's submission into each
// would. A claim waits for the first, in vain, and passes the others by
// without waiting: waiting 50 ms for each, it would take 15 s. It takes the
// task of an uncapped process. (The test's 10 s is that bound, not a timing.)
func TestClaimWaitsOnce(t *testing.T) {
	d := migratedDB(t)
	ctx := context.Background()
	execSQL(t, d, `INSERT INTO stageq.processes (name, current_order, max_parallel) SELECT 'c' || g, 1, 2 FROM generate_series(1, 300) g`)
	execSQL(t, d, `INSERT INTO stageq.tasks (process_id, execution_order, body, state, kind)
SELECT id, 1, '{}', 'available', 'k' FROM stageq.processes WHERE name LIKE 'c%'`)
	submitTasks(t, d, nil, "other", 1, "")
	execSQL(t, d, `UPDATE stageq.tasks SET vtime = vtime + 1000000000 WHERE kind = 'kother'`) // last in line
	holdProcesses(t, d, `LIKE 'c%'`)
	if got := <-claimIn(ctx, t, d, "w", 1); len(got) != 1 || got[0].Process != "other" {
		t.Fatalf("claim: %+v; want the task of process other", got)
	}
}

// TestClaimDoesNotWaitForAFullLimit: capped process C is full (its one slot
// taken) and another transaction holds its row, as the next claims and C's
// completions do all the while under load. A look without the lock says C is
// full, so the claim passes it by at once instead of queueing on its row.
func TestClaimDoesNotWaitForAFullLimit(t *testing.T) {
	d := migratedDB(t)
	ctx := context.Background()
	cappedTasks(t, d, "C", 3, 1)
	if got := <-claimIn(ctx, t, d, "first", 1); len(got) != 1 {
		t.Fatalf("first claim: %d tasks", len(got))
	}
	submitTasks(t, d, nil, "other", 1, "")
	waitLonger(t, d) // a claim that waited would fail its 10 s
	holdProcesses(t, d, `= 'C'`)
	if got := <-claimIn(ctx, t, d, "w", 10); len(got) != 1 || got[0].Process != "other" {
		t.Fatalf("claim: %+v; want the task of process other alone", got)
	}
}

// TestClaimAdmitsUnderAKeyWithoutALimit: with limits about (the gated
// claim), a task whose limit key names no limit, and a kind no limit names,
// is claimed: slot_check finds no row to lock and says 'none'.
func TestClaimAdmitsUnderAKeyWithoutALimit(t *testing.T) {
	d := migratedDB(t)
	limitTasks(t, d, "L", 1, 5)
	execSQL(t, d, `INSERT INTO stageq.limits (key, max_running) VALUES ('kind:other', 1)`)
	submitTasks(t, d, nil, "free", 2, "no-such-limit")
	if got := <-claimIn(context.Background(), t, d, "w", 10); len(got) != 3 {
		t.Fatalf("claim: %d tasks; want all 3 (L admits its one, the others have no limit)", len(got))
	}
}
