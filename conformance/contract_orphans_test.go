package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// Tasks whose process row was deleted by hand (PostgreSQL has had no foreign
// key from tasks to processes since migration 14; SQLite's is off in the
// sqlite3 shell) never hold the queue up. Their expired leases are removed
// with the tasks, their attempts closed abandoned, and a rescue pass of Max 2
// reaches the live task behind three of them; a claim hands none of them to a
// worker and removes one that a retry left scheduled, with a Logs row that
// says so (cancelled); every one of them is gone in the end. Meanwhile the expired lease of a process
// that is only locked elsewhere stays as it is until the lock goes. On SQL
// Server the foreign key refuses the DELETE. Registered in
// TestDialectContract (contract_test.go).
func contractTaskRescueOrphans(t *testing.T, db *testDB) {
	db.skipOnBabelfish(t, "no claim there (harness_test.go)")
	ctx := context.Background()
	lease := 50 * time.Millisecond
	claimOwn := func(what string, token int64, want int) []dialect.ClaimedTask {
		t.Helper()
		got, err := db.D.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "gone", Max: 10, Token: token, Lease: lease})
		if err != nil || len(got) != want {
			t.Fatalf("claim %s: %d tasks, %v; want %d", what, len(got), err, want)
		}
		return got
	}
	orphans := dialect.SubmitParams{Process: "c-orphans"}
	for range 3 {
		orphans.Tasks = append(orphans.Tasks, dialect.NewTask{Order: 1, Kind: "work", Body: "x", MaxAttempts: 1})
	}
	res, err := db.D.Submit(ctx, nil, orphans)
	if err != nil {
		t.Fatal(err)
	}
	claimOwn("the orphans-to-be", 21, 3)
	submitOneTask(t, db, "c-live")
	live := claimOwn("the live task", 22, 1)

	busy := db.Dialect == "postgres" // a row lock held elsewhere; SQLite has none
	var busyID int64
	if busy {
		r, err := db.D.Submit(ctx, nil, oneTask("c-busy"))
		if err != nil {
			t.Fatal(err)
		}
		busyID = r.ProcessID
		claimOwn("the busy process's task", 25, 1)
	}

	// A task whose worker is alive and finishes it after the DELETE, one that
	// failed and waits for its retry, and one that waits for a worker: all of
	// processes deleted below.
	ending, err := db.D.Submit(ctx, nil, oneTask("c-orphan-ending"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := db.D.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "alive", Max: 10, Token: 26, Lease: time.Minute})
	if err != nil || len(e) != 1 {
		t.Fatalf("claim the task to end: %+v, %v", e, err)
	}
	failing, err := db.D.Submit(ctx, nil, dialect.SubmitParams{Process: "c-orphan-failing",
		Tasks: []dialect.NewTask{{Order: 1, Kind: "work", Body: "x", MaxAttempts: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	f := claimOwn("the task to fail", 27, 1)
	retry, err := db.D.Submit(ctx, nil, dialect.SubmitParams{Process: "c-orphan-retry",
		Tasks: []dialect.NewTask{{Order: 1, Kind: "work", Body: "x", MaxAttempts: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	r := claimOwn("the task to retry", 24, 1)
	if err := db.finish(ctx, dialect.FinishParams{TaskID: r[0].ID, Token: 24, ProcessID: retry.ProcessID,
		Outcome: dialect.OutcomeFailed, Error: "boom", RetryAfter: time.Millisecond}); err != nil {
		t.Fatalf("fail the task to retry: %v", err)
	}
	waiting, err := db.D.Submit(ctx, nil, oneTask("c-orphan-waiting"))
	if err != nil {
		t.Fatal(err)
	}

	gone := fmt.Sprintf("%d, %d, %d, %d, %d", res.ProcessID, retry.ProcessID, waiting.ProcessID, ending.ProcessID, failing.ProcessID)
	if !deleteProcessesByHand(t, db, gone) {
		return
	}

	if err := db.finish(ctx, dialect.FinishParams{TaskID: e[0].ID, Token: 26, ProcessID: ending.ProcessID,
		Outcome: dialect.OutcomeSucceeded}); err != nil {
		t.Fatalf("finish a task whose process was deleted while it ran: %v; want it recorded", err)
	}
	if l := db.logs(t, dialect.LogFilter{Process: "c-orphan-ending"}); len(l) != 1 || l[0].Outcome != dialect.OutcomeSucceeded {
		t.Fatalf("Logs of the task that ended after its process went: %+v; want it succeeded", l)
	}
	// A failure to retry would put the task back to wait for a process that
	// is gone: it is refused as a lost lease, and the rescue removes the task.
	err = db.finish(ctx, dialect.FinishParams{TaskID: f[0].ID, Token: 27, ProcessID: failing.ProcessID,
		Outcome: dialect.OutcomeFailed, Error: "boom", RetryAfter: time.Millisecond})
	if !errors.Is(err, dialect.ErrLeaseLost) {
		t.Fatalf("a failure to retry after the process went: %v; want ErrLeaseLost", err)
	}

	var hold interface{ Rollback() error }
	if busy {
		tx, err := db.D.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		hold = tx
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("SELECT 1 FROM stageq.processes WHERE id = %d FOR UPDATE", busyID)); err != nil {
			t.Fatal(err)
		}
	}

	// The expired leases: three orphans', the live task's, the busy
	// process's (PostgreSQL) and the refused failure's. Both rescues come to
	// the three orphans before the live task: SQLite's reads by expiry, and
	// PostgreSQL's, through tasks_running, by process, where theirs is first.
	rescued := 0
	waitFor(t, 10*time.Second, "rescue passes of max 2 to reach the live task behind three orphans", func() bool {
		n, err := db.D.TaskRescueExpired(ctx, dialect.RescueParams{Max: 2})
		if err != nil {
			t.Fatalf("rescue: %v", err)
		}
		rescued += n
		tk := db.tasks(t, dialect.TaskFilter{Process: "c-live"})
		return len(tk) == 1 && tk[0].State == dialect.StateAvailable
	})
	if rescued < 4 {
		t.Errorf("rescue passes counted %d tasks; want 4 or 5 (three removed, one handed back, perhaps one more removed)", rescued)
	}
	logs := db.logs(t, dialect.LogFilter{Process: "c-orphans"})
	if len(logs) != 3 || countOutcome(logs, dialect.OutcomeAbandoned) != 3 {
		t.Fatalf("Logs of the deleted process: %+v; want its three attempts closed abandoned", logs)
	}
	for _, e := range logs {
		if !strings.Contains(e.Error, "no longer exists") {
			t.Errorf("attempt of task %d closed with %q; want it to say the process is gone", e.TaskID, e.Error)
		}
	}

	// The live task, handed back, is claimed again and nothing else is: the
	// orphans waiting are passed over or leased unseen.
	if again := claimOwn("after the rescue", 23, 1); again[0].ID != live[0].ID {
		t.Fatalf("claim after the rescue: %+v; want the live task alone", again)
	}
	all := fmt.Sprintf("SELECT count(*) FROM %s WHERE process_id IN (%s)", db.table("tasks"), gone)
	waitFor(t, 10*time.Second, "every task of the deleted processes to be removed", func() bool {
		if _, err := db.D.TaskRescueExpired(ctx, dialect.RescueParams{Max: 10}); err != nil {
			t.Fatalf("rescue: %v", err)
		}
		return db.count(t, all) == 0
	})
	// The retry's task, removed by a claim once due: its last Logs row had
	// promised the retry, so one more says it will not come.
	retried := db.logs(t, dialect.LogFilter{TaskID: r[0].ID})
	if len(retried) != 2 || retried[0].Outcome != dialect.OutcomeFailed || retried[1].Outcome != dialect.OutcomeCancelled ||
		!strings.Contains(retried[1].Error, "no longer exists") || retried[1].Process != "c-orphan-retry" {
		t.Errorf("Logs of the task whose retry was due after its process went: %+v; want its failure, then a "+
			"cancelled row under c-orphan-retry saying the process no longer exists", retried)
	}

	if !busy {
		return
	}
	if tk := db.tasks(t, dialect.TaskFilter{Process: "c-busy"}); len(tk) != 1 || tk[0].State != dialect.StateRunning {
		t.Fatalf("the task of the locked process: %+v; want it still running (its process is busy, not gone)", tk)
	}
	if l := db.logs(t, dialect.LogFilter{Process: "c-busy"}); len(l) != 1 || l[0].EndedAt != nil {
		t.Fatalf("Logs of the locked process: %+v; want its attempt still open", l)
	}
	hold.Rollback()
	waitFor(t, 10*time.Second, "the locked process's expired lease to be rescued once its lock is gone", func() bool {
		if _, err := db.D.TaskRescueExpired(ctx, dialect.RescueParams{Max: 10}); err != nil {
			t.Fatalf("rescue: %v", err)
		}
		tk := db.tasks(t, dialect.TaskFilter{Process: "c-busy"})
		return len(tk) == 1 && tk[0].State == dialect.StateAvailable
	})
}

// deleteProcessesByHand deletes the process rows of ids (a list for IN) as a
// DBA would, tasks or not, and says whether the database let it: on SQLite
// with foreign keys off, as the sqlite3 shell leaves them; PostgreSQL has no
// foreign key from tasks to processes (migration 14); on SQL Server
// FK_Tasks_Processes must refuse it, and the test has nothing more to see.
func deleteProcessesByHand(t *testing.T, db *testDB, ids string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := db.D.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if db.Dialect == "sqlite" {
		if _, err := conn.ExecContext(ctx, "PRAGMA foreign_keys = OFF"); err != nil {
			t.Fatal(err)
		}
		defer conn.ExecContext(ctx, "PRAGMA foreign_keys = ON")
	}
	_, err = conn.ExecContext(ctx, fmt.Sprintf("DELETE FROM %s WHERE id IN (%s)", db.table("processes"), ids))
	if db.Dialect == "sqlserver" {
		if err == nil {
			t.Fatal("SQL Server deleted processes that have tasks; want FK_Tasks_Processes to refuse it")
		}
		return false
	}
	if err != nil {
		t.Fatalf("delete processes %s by hand: %v", ids, err)
	}
	return true
}

// An operator's command on a task whose process row was deleted by hand (its
// id found in Logs, say): a retry would put it back to wait for a stage that
// can never open, so it is refused, saying why and what to do instead; a
// discard of a failed one and a cancel of a waiting one remove it, each
// leaving its Logs row under the process's last known name. Before, the
// retry failed on PostgreSQL with "null value in column vtime", and every
// one of them on SQLite with "read process N: no rows", leaving the task for
// ever. Registered in TestDialectContract (contract_test.go).
func contractTaskOperationsOrphaned(t *testing.T, db *testDB) {
	db.skipOnBabelfish(t, "no claim there (harness_test.go)")
	ctx := dialect.WithActor(context.Background(), "c-orphan-op")
	op := limOperator(t, db)
	pid := twoStages(t, db, "c-orphan-op", 2)
	claimed := claimAs(t, db, "w", 31, 10, nil)
	if len(claimed) != 2 {
		t.Fatalf("claimed %d; want the 2 order-1 tasks", len(claimed))
	}
	for _, c := range claimed {
		failOneFinish(t, db, c)
	}
	later := int64(0)
	for _, tk := range db.tasks(t, dialect.TaskFilter{Process: "c-orphan-op"}) {
		if tk.Order == 2 {
			later = tk.ID
		}
	}
	if later == 0 {
		t.Fatal("no order-2 task")
	}
	if !deleteProcessesByHand(t, db, fmt.Sprint(pid)) {
		return
	}
	left := func(id int64) int {
		return db.count(t, fmt.Sprintf("SELECT count(*) FROM %s WHERE id = %d", db.table("tasks"), id))
	}

	a, b := claimed[0].ID, claimed[1].ID
	err := op.TaskRetry(ctx, a)
	if !errors.Is(err, dialect.ErrWrongState) || !strings.Contains(err.Error(), "no longer exists") {
		t.Fatalf("retry of a failed task whose process is gone: %v; want ErrWrongState saying the process no longer exists", err)
	}
	if left(a) != 1 {
		t.Fatalf("the refused retry removed task %d", a)
	}
	if err := op.TaskDiscard(ctx, a); err != nil {
		t.Fatalf("discard of a failed task whose process is gone: %v", err)
	}
	if err := op.TaskCancel(ctx, b); err != nil {
		t.Fatalf("cancel of a failed task whose process is gone: %v", err)
	}
	if err := op.TaskCancel(ctx, later); err != nil {
		t.Fatalf("cancel of a waiting task whose process is gone: %v", err)
	}
	for _, id := range []int64{a, b, later} {
		if left(id) != 0 {
			t.Errorf("task %d is still in the queue", id)
		}
	}
	for id, want := range map[int64]dialect.Outcome{a: dialect.OutcomeDiscarded, b: dialect.OutcomeCancelled, later: dialect.OutcomeCancelled} {
		l := db.logs(t, dialect.LogFilter{TaskID: id, Outcome: want})
		if len(l) != 1 || l[0].Process != "c-orphan-op" || l[0].WorkerID != "c-orphan-op" {
			t.Errorf("Logs of task %d, %s: %+v; want one row by c-orphan-op under the process's name", id, want, l)
		}
	}
}
