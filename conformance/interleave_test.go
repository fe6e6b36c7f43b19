package conformance

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/stages"
)

// The tests in this file force the interleavings that a completion which does
// not lock its process opens: two transactions are held open at the points
// where they race, rather than hoping a sleep lands there. They apply to
// dialects that advance stages after the completing commit
// (dialect.StageAdvancer); SQLite has one writer at a time and advances inside
// the completion.

func stageAdvancer(t *testing.T, db *testDB) dialect.StageAdvancer {
	t.Helper()
	sa, ok := db.D.(dialect.StageAdvancer)
	if !ok {
		t.Skipf("%s advances a stage inside the completing transaction: no race to force", db.Dialect)
	}
	return sa
}

// advance advances the stages of process pid (StagesAdvance) and fails the
// test unless that succeeds with the process not reported busy.
func advance(t *testing.T, sa dialect.StageAdvancer, pid int64, what string) {
	t.Helper()
	if busy, err := sa.StagesAdvance(context.Background(), []int64{pid}); err != nil || len(busy) != 0 {
		t.Fatalf("%s: busy %v, %v", what, busy, err)
	}
}

// stageStates maps each task of the process to its state, by order.
func stageStates(t *testing.T, db *testDB, process string) map[int][]string {
	t.Helper()
	tasks := db.tasks(t, dialect.TaskFilter{Process: process})
	out := map[int][]string{}
	for _, tk := range tasks {
		out[tk.Order] = append(out[tk.Order], tk.State)
	}
	return out
}

// claimAll claims every available task of the queue for one worker.
func claimAll(t *testing.T, db *testDB, token int64, want int) []dialect.ClaimedTask {
	t.Helper()
	got := claimAs(t, db, "w", token, 100, nil)
	if len(got) != want {
		t.Fatalf("claim: %d tasks; want %d", len(got), want)
	}
	return got
}

// TestLastTwoFinishesOfAStage: the two last tasks of a stage finish in two
// transactions that are both open at once. Whichever commits first looks and
// still sees the other's task; the one that commits last sees none and opens
// the next stage. Advancing again (both workers do) changes nothing.
func TestLastTwoFinishesOfAStage(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		sa := stageAdvancer(t, db)
		ctx := context.Background()
		res := db.submit(t, plan("pair", "work", []int{100, 200}, sameBody("x"), 2))
		got := claimAll(t, db, 1, 2)
		finishIn := func(task dialect.ClaimedTask) interface{ Commit() error } {
			tx, err := db.D.BeginTx(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tx.Rollback() })
			db.succeed(t, tx, task)
			return tx
		}
		tx1, tx2 := finishIn(got[0]), finishIn(got[1])
		if err := tx1.Commit(); err != nil {
			t.Fatal(err)
		}
		advance(t, sa, res.ProcessID, "first advance")
		if st := stageStates(t, db, "pair"); !slices.Equal(st[200], []string{dialect.StateBlocked, dialect.StateBlocked}) {
			t.Fatalf("after the first commit, stage 200 is %v; want still blocked (a task of 100 is uncommitted)", st[200])
		}
		if err := tx2.Commit(); err != nil {
			t.Fatal(err)
		}
		for range 2 { // the second worker's advance, and a repeat
			advance(t, sa, res.ProcessID, "advance")
		}
		if st := stageStates(t, db, "pair"); !slices.Equal(st[200], []string{dialect.StateAvailable, dialect.StateAvailable}) || len(st[100]) != 0 {
			t.Fatalf("after the last commit: %v; want stage 200 available", st)
		}
		claimAll(t, db, 2, 2)
	})
}

// TestAdvanceDoesNotWaitForAHeldProcess: an application's submission holds the
// process row in a transaction it keeps open while the stage's last task
// finishes. The advance does not wait for it: it reports the process busy, and
// succeeds once the submission committed.
func TestAdvanceDoesNotWaitForAHeldProcess(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		db.skipOnBabelfish(t, "G1: table hints are ignored, so stageq.AdvanceProcess cannot READPAST the process row the open submission holds (seen: not reported busy)")
		sa := stageAdvancer(t, db)
		ctx := context.Background()
		res := db.submit(t, plan("held", "work", []int{100, 300}, sameBody("x"), 1))
		got := claimAll(t, db, 1, 1)
		tx := db.holdSubmission(t, plan("held", "work", []int{300}, sameBody("y"), 1))
		defer tx.Rollback()
		db.succeed(t, nil, got[0])
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		busy, err := sa.StagesAdvance(actx, []int64{res.ProcessID})
		if err != nil || !slices.Equal(busy, []int64{res.ProcessID}) {
			t.Fatalf("advance while the submission is open: busy %v, %v; want the process reported busy at once", busy, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		advance(t, sa, res.ProcessID, "advance after the commit")
		if st := stageStates(t, db, "held"); !slices.Equal(st[300], []string{dialect.StateAvailable, dialect.StateAvailable}) {
			t.Fatalf("stage 300 is %v; want both tasks available", st[300])
		}
	})
}

// TestRescueRepairsALostAdvance: a worker that dies between committing a
// stage's last task and advancing the stage leaves the next stage blocked; the
// rescue pass, which every worker runs, opens it.
func TestRescueRepairsALostAdvance(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		stageAdvancer(t, db)
		ctx := context.Background()
		db.submit(t, plan("lost", "work", []int{1, 2}, sameBody("x"), 1))
		got := claimAll(t, db, 1, 1)
		db.succeed(t, nil, got[0])
		if st := stageStates(t, db, "lost"); !slices.Equal(st[2], []string{dialect.StateBlocked}) {
			t.Fatalf("before the rescue pass, stage 2 is %v; want blocked (nobody advanced it)", st[2])
		}
		if _, err := db.D.TaskRescueExpired(ctx, dialect.RescueParams{Max: 100}); err != nil {
			t.Fatal(err)
		}
		if st := stageStates(t, db, "lost"); !slices.Equal(st[2], []string{dialect.StateAvailable}) {
			t.Fatalf("after the rescue pass, stage 2 is %v; want available", st[2])
		}
	})
}

// TestRetryWaitsForAnOpenLowerOrder: a task is handed back for a retry while a
// submission of a lower order to its process is open. The hand-back waits for
// the submission's process lock instead of reading the stage before it, so the
// task goes back blocked behind the new lower order, not available.
func TestRetryWaitsForAnOpenLowerOrder(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		stageAdvancer(t, db)
		ctx := context.Background()
		db.enqueue(t, "lower", 200, stages.Task{Kind: "work", Body: "x"})
		got := claimAll(t, db, 1, 1)
		tx := db.holdSubmission(t, plan("lower", "work", []int{100}, sameBody("y"), 1))
		defer tx.Rollback()
		finished := make(chan error, 1)
		go func() {
			finished <- db.D.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: got[0].ID, Token: got[0].Token,
				Outcome: dialect.OutcomeFailed, Error: "boom", RetryAfter: time.Millisecond})
		}()
		select {
		case err := <-finished:
			t.Fatalf("the hand-back did not wait for the open submission's process lock (err %v)", err)
		case <-time.After(300 * time.Millisecond):
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-finished; err != nil {
			t.Fatal(err)
		}
		st := stageStates(t, db, "lower")
		if !slices.Equal(st[200], []string{dialect.StateBlocked}) || !slices.Equal(st[100], []string{dialect.StateAvailable}) {
			t.Fatalf("states %v; want 100 available and the retried 200 blocked", st)
		}
	})
}
