package conformance

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/stages"
)

// The operator's methods (dialect/operate.go) and the reads and retention
// beside them, each pinned to what its interface documents. Registered in
// TestDialectContract (contract_test.go).

// stateOf reads task id's state ("gone" once it left the queue).
func stateOf(t *testing.T, db *testDB, process string, id int64) string {
	t.Helper()
	for _, tk := range db.tasks(t, dialect.TaskFilter{Process: process}) {
		if tk.ID == id {
			return tk.State
		}
	}
	return "gone"
}

// ProcessGet: ErrNotFound for an unknown name; a new process is active at
// its lowest order.
func contractProcessGet(t *testing.T, db *testDB) {
	ctx := context.Background()
	if p, err := db.D.ProcessGet(ctx, "c-nobody"); !errors.Is(err, dialect.ErrNotFound) {
		t.Fatalf("ProcessGet of an unknown process = %+v, %v; want ErrNotFound", p, err)
	}
	pid := twoStages(t, db, "c-get", 1)
	p, err := db.D.ProcessGet(ctx, "c-get")
	if err != nil || p.ID != pid || p.Name != "c-get" || p.State != dialect.ProcessActive || p.CurrentOrder == nil || *p.CurrentOrder != 1 {
		t.Fatalf("ProcessGet = %+v, %v; want process %d, active, at order 1", p, err, pid)
	}
}

// ProcessList: with a limit, the first processes by name, each with its stage
// counts; without one, every process.
func contractProcessList(t *testing.T, db *testDB) {
	ctx := context.Background()
	op := limOperator(t, db)
	for _, name := range []string{"c-list-b", "c-list-c", "c-list-a"} {
		twoStages(t, db, name, 2)
	}
	page, err := op.ProcessList(ctx, dialect.ProcessFilter{Limit: 2})
	if err != nil || len(page) != 2 || page[0].Name != "c-list-a" || page[1].Name != "c-list-b" {
		t.Fatalf("ProcessList, limit 2: %+v, %v; want c-list-a and c-list-b", page, err)
	}
	for _, p := range page {
		if len(p.Stages) != 2 || p.Stages[0].Pending != 2 || p.Stages[1].Pending != 1 {
			t.Errorf("%s's stages: %+v; want 2 pending at order 1 and 1 at order 2", p.Name, p.Stages)
		}
	}
	if all, err := op.ProcessList(ctx, dialect.ProcessFilter{}); err != nil || len(all) != 3 {
		t.Fatalf("ProcessList without a limit: %d processes, %v; want 3", len(all), err)
	}
	if db.Babelfish {
		return // no claim there (harness_test.go)
	}
	// Done counts the tasks that succeeded, once each, from Logs: one
	// succeeded here, one failed; the claim also opened attempts of the
	// other processes' tasks.
	var mine []dialect.ClaimedTask
	for _, c := range claimAs(t, db, "w", 7, 10, nil) {
		if c.Process == "c-list-b" {
			mine = append(mine, c)
		}
	}
	if len(mine) != 2 {
		t.Fatalf("claimed %d of c-list-b's first stage, want 2", len(mine))
	}
	for i, outcome := range []dialect.Outcome{dialect.OutcomeSucceeded, dialect.OutcomeFailed} {
		if err := db.D.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: mine[i].ID, Token: 7, ProcessID: mine[i].ProcessID,
			Outcome: outcome, Error: "boom"}); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := op.ProcessList(ctx, dialect.ProcessFilter{Name: "c-list-b"})
	if err != nil || len(ps) != 1 || len(ps[0].Stages) != 2 {
		t.Fatalf("ProcessList c-list-b: %+v, %v", ps, err)
	}
	if st := ps[0].Stages[0]; st.Done != 1 || st.Failed != 1 || st.Running != 0 || st.Pending != 0 {
		t.Errorf("c-list-b's first stage: %+v; want 1 done, 1 failed", st)
	}
}

// LogList: rows by start, then id (a bulk cancel starts them all at one
// instant); a limit takes the first rows, or with Newest the last ones, still
// oldest first; AfterID pages past a row among those that started at Since;
// a process by name or by id selects the same rows.
func contractLogList(t *testing.T, db *testDB) {
	ctx := context.Background()
	op := limOperator(t, db)
	later := time.Now().Add(time.Hour)
	p := dialect.SubmitParams{Process: "c-logs"}
	for range 5 {
		p.Tasks = append(p.Tasks, dialect.NewTask{Order: 1, Kind: "work", Body: "x", MaxAttempts: 1, RunAt: &later})
	}
	res, err := db.D.Submit(ctx, nil, p)
	if err != nil {
		t.Fatal(err)
	}
	if removed, _, err := op.ProcessCancel(ctx, "c-logs"); err != nil || removed != 5 {
		t.Fatalf("ProcessCancel: %d removed, %v; want 5", removed, err)
	}
	p.Process = "c-logs-other" // rows that no filter below may return
	if _, err := db.D.Submit(ctx, nil, p); err != nil {
		t.Fatal(err)
	}
	if _, _, err := op.ProcessCancel(ctx, "c-logs-other"); err != nil {
		t.Fatal(err)
	}
	all, err := db.D.LogList(ctx, dialect.LogFilter{Process: "c-logs"})
	if err != nil || len(all) != 5 {
		t.Fatalf("LogList: %d rows, %v; want the 5 cancels", len(all), err)
	}
	ids := logIDs(all)
	if !slices.IsSorted(ids) {
		t.Fatalf("LogList of rows started at one instant: ids %v, want ascending", ids)
	}
	// Ids past 32 bits are ids like any other (no row has these).
	for _, f := range []dialect.LogFilter{{ProcessID: 3_000_000_000}, {TaskID: 3_000_000_000}} {
		if got, err := db.D.LogList(ctx, f); err != nil || len(got) != 0 {
			t.Errorf("LogList %+v: %d rows, %v; want none", f, len(got), err)
		}
	}
	for _, c := range []struct {
		what string
		f    dialect.LogFilter
		want []int64
	}{
		{"limit 2", dialect.LogFilter{Limit: 2}, ids[:2]},
		{"limit 2, newest", dialect.LogFilter{Limit: 2, Newest: true}, ids[3:]},
		{"newest, no limit", dialect.LogFilter{Newest: true}, ids},
		{"after the second", dialect.LogFilter{Since: all[1].StartedAt, AfterID: ids[1], Limit: 2}, ids[2:4]},
		{"after the second, newest", dialect.LogFilter{Since: all[1].StartedAt, AfterID: ids[1], Limit: 2, Newest: true}, ids[3:]},
	} {
		for _, by := range []string{"name", "id", "both"} { // the same rows by the process's name, id or both
			f := c.f
			if by != "id" {
				f.Process = "c-logs"
			}
			if by != "name" {
				f.ProcessID = res.ProcessID
			}
			got, err := db.D.LogList(ctx, f)
			if err != nil || !slices.Equal(logIDs(got), c.want) {
				t.Errorf("LogList, %s, process by %s: ids %v, %v; want %v", c.what, by, logIDs(got), err, c.want)
			}
		}
	}
}

// logIDs are the ids of Logs rows, in their order.
func logIDs(es []dialect.LogEntry) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

// ProcessSetPaused: ErrNotFound for an unknown process. Paused, a process's
// running tasks still finish, and the stage they end opens the next one
// only once it is resumed.
func contractProcessSetPaused(t *testing.T, db *testDB) {
	db.skipOnBabelfish(t, "no claim there (harness_test.go)")
	ctx := context.Background()
	op := limOperator(t, db)
	if err := op.ProcessSetPaused(ctx, "c-nobody", true); !errors.Is(err, dialect.ErrNotFound) {
		t.Fatalf("pause an unknown process: %v; want ErrNotFound", err)
	}
	pid := twoStages(t, db, "c-pause", 2)
	running := claimAs(t, db, "w", 1, 10, nil)
	if len(running) != 2 {
		t.Fatalf("claimed %d; want the 2 order-1 tasks", len(running))
	}
	if err := op.ProcessSetPaused(ctx, "c-pause", true); err != nil {
		t.Fatal(err)
	}
	for _, c := range running { // one batch each: the first leaves its stage a task, the second empties it
		if held := finishBatch(t, db, dialect.FinishParams{TaskID: c.ID, Token: 1, ProcessID: pid, Outcome: dialect.OutcomeSucceeded}); !held[0] {
			t.Fatalf("a running task of a paused process could not finish")
		}
	}
	if got := claimAs(t, db, "w", 2, 10, nil); len(got) != 0 {
		t.Fatalf("a claim took %+v of a paused process", got)
	}
	if err := op.ProcessSetPaused(ctx, "c-pause", false); err != nil {
		t.Fatal(err)
	}
	if got := claimAs(t, db, "w", 3, 10, nil); len(got) != 1 || got[0].Order != 2 {
		t.Fatalf("after resuming a claim took %+v; want the order-2 task", got)
	}
}

// ProcessCancel removes what is not running and counts what still runs; with
// nothing left to remove it is ErrWrongState. (Its Logs rows are
// TestOperatorAudit's.)
func contractProcessCancel(t *testing.T, db *testDB) {
	db.skipOnBabelfish(t, "no claim there (harness_test.go)")
	ctx := context.Background()
	op := limOperator(t, db)
	if _, _, err := op.ProcessCancel(ctx, "c-nobody"); !errors.Is(err, dialect.ErrNotFound) {
		t.Fatalf("cancel an unknown process: %v; want ErrNotFound", err)
	}
	twoStages(t, db, "c-cancel", 2)
	running := claimAs(t, db, "w", 1, 1, nil)
	removed, still, err := op.ProcessCancel(ctx, "c-cancel")
	if err != nil || removed != 2 || still != 1 {
		t.Fatalf("cancel: removed %d, running %d, %v; want 2 removed (one of order 1, the order-2 task), 1 running", removed, still, err)
	}
	left := db.tasks(t, dialect.TaskFilter{Process: "c-cancel"})
	if len(left) != 1 || left[0].ID != running[0].ID || left[0].State != dialect.StateRunning {
		t.Fatalf("left after the cancel: %+v; want only the running task", left)
	}
	if _, _, err := op.ProcessCancel(ctx, "c-cancel"); !errors.Is(err, dialect.ErrWrongState) {
		t.Fatalf("cancel with only a running task left: %v; want ErrWrongState", err)
	}
}

// TaskRetry, TaskDiscard and TaskCancel: ErrNotFound for a task not in the
// queue; ErrWrongState where the state does not allow it (retry and discard
// only a failed task, cancel only one not running), changing nothing; a
// retried task runs again with fresh attempts, and discarding a failed task
// lets the stages after it run.
func contractTaskOperations(t *testing.T, db *testDB) {
	db.skipOnBabelfish(t, "no claim there (harness_test.go)")
	ctx := dialect.WithActor(context.Background(), "c-op")
	op := limOperator(t, db)
	for name, f := range map[string]func(context.Context, int64) error{
		"retry": op.TaskRetry, "discard": op.TaskDiscard, "cancel": op.TaskCancel,
	} {
		if err := f(ctx, 987654321); !errors.Is(err, dialect.ErrNotFound) {
			t.Errorf("%s of a task not in the queue: %v; want ErrNotFound", name, err)
		}
	}
	twoStages(t, db, "c-task", 1)
	var waiting int64
	for _, tk := range db.tasks(t, dialect.TaskFilter{Process: "c-task"}) {
		if tk.Order == 1 {
			waiting = tk.ID
		}
	}
	if err := op.TaskRetry(ctx, waiting); !errors.Is(err, dialect.ErrWrongState) {
		t.Errorf("retry of an available task: %v; want ErrWrongState", err)
	}
	if err := op.TaskDiscard(ctx, waiting); !errors.Is(err, dialect.ErrWrongState) {
		t.Errorf("discard of an available task: %v; want ErrWrongState", err)
	}
	running := claimAs(t, db, "w", 20, 1, nil)
	if err := op.TaskCancel(ctx, running[0].ID); !errors.Is(err, dialect.ErrWrongState) {
		t.Errorf("cancel of a running task: %v; want ErrWrongState", err)
	}
	if s := stateOf(t, db, "c-task", running[0].ID); s != dialect.StateRunning {
		t.Fatalf("after refused operations the task is %s; want running", s)
	}
	failOneFinish(t, db, running[0])
	if p, err := db.D.ProcessGet(ctx, "c-task"); err != nil || p.State != dialect.ProcessFailed {
		t.Fatalf("process after its task failed for good: %+v, %v; want failed", p, err)
	}
	if err := op.TaskRetry(ctx, waiting); err != nil {
		t.Fatalf("retry of a failed task: %v", err)
	}
	again := claimAs(t, db, "w", 22, 10, nil)
	if len(again) != 1 || again[0].ID != waiting || again[0].Attempt != 1 {
		t.Fatalf("claim after the retry: %+v; want the retried task, as attempt 1 (fresh attempts)", again)
	}
	failOneFinish(t, db, again[0])
	if err := op.TaskDiscard(ctx, waiting); err != nil {
		t.Fatalf("discard of a failed task: %v", err)
	}
	if s := stateOf(t, db, "c-task", waiting); s != "gone" {
		t.Fatalf("discarded task is %s; want it out of the queue", s)
	}
	if got := claimAs(t, db, "w", 23, 10, nil); len(got) != 1 || got[0].Order != 2 {
		t.Fatalf("after discarding order 1's failed task the claim took %+v; want the order-2 task", got)
	}
	// Their Logs rows (who, what, when) are TestOperatorAudit's.
}

// failOneFinish records c's attempt failed for good.
func failOneFinish(t *testing.T, db *testDB, c dialect.ClaimedTask) {
	t.Helper()
	if err := db.finish(context.Background(), dialect.FinishParams{TaskID: c.ID, Token: c.Token, ProcessID: c.ProcessID,
		Outcome: dialect.OutcomeFailed, Error: "boom"}); err != nil {
		t.Fatal(err)
	}
}

// LimitDelete: ErrNotFound for a key with no limit; a deleted limit is gone.
func contractLimitDelete(t *testing.T, db *testDB) {
	ctx := context.Background()
	op := limOperator(t, db)
	for _, none := range []string{"c-none", "kind:c-none", "process:c-nobody"} {
		if err := op.LimitDelete(ctx, none); !errors.Is(err, dialect.ErrNotFound) {
			t.Errorf("LimitDelete(%q) = %v; want ErrNotFound", none, err)
		}
	}
	if err := op.LimitSet(ctx, "c-lim", 2); err != nil {
		t.Fatal(err)
	}
	if err := op.LimitDelete(ctx, "c-lim"); err != nil {
		t.Fatal(err)
	}
	if l, err := op.LimitGet(ctx, "c-lim"); !errors.Is(err, dialect.ErrNotFound) {
		t.Fatalf("LimitGet after the delete = %+v, %v; want ErrNotFound", l, err)
	}
	if err := op.LimitDelete(ctx, "c-lim"); !errors.Is(err, dialect.ErrNotFound) {
		t.Fatalf("a second delete: %v; want ErrNotFound", err)
	}
}

// Pruner: no pass recorded reads as none; a recorded pass reads back; a
// running attempt's Logs row and the default process are never deleted.
func contractPrune(t *testing.T, db *testDB) {
	ctx := context.Background()
	pr, ok := db.D.(dialect.Pruner)
	if !ok {
		t.Skipf("%s keeps everything", db.Dialect)
	}
	if s, ok, err := pr.PruneLast(ctx); err != nil || ok {
		t.Fatalf("PruneLast before any pass: %+v, %v, %v; want none", s, ok, err)
	}
	rec := dialect.PruneStatus{WorkerID: "c-pruner", LogsDeleted: 3, ProcessesDeleted: 1, RetainLogs: time.Hour}
	if err := pr.PruneRecord(ctx, rec); err != nil {
		t.Fatal(err)
	}
	s, ok, err := pr.PruneLast(ctx)
	if err != nil || !ok || s.WorkerID != "c-pruner" || s.LogsDeleted != 3 || s.ProcessesDeleted != 1 || s.RanAt.IsZero() {
		t.Fatalf("PruneLast = %+v, %v, %v; want the pass recorded, with its time", s, ok, err)
	}
	if db.Babelfish {
		return // what follows claims (harness_test.go)
	}
	db.enqueue(t, "", 1, stages.Task{Body: "x"})
	db.enqueue(t, "", 1, stages.Task{Body: "y"})
	got := claimAs(t, db, "w", 30, 2, nil)
	if len(got) != 2 || got[0].Process != "default" {
		t.Fatalf("claim: %+v; want the default process's two tasks", got)
	}
	if err := db.finish(ctx, dialect.FinishParams{TaskID: got[0].ID, Token: 30, ProcessID: got[0].ProcessID, Outcome: dialect.OutcomeSucceeded}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // both Logs rows start before now - Age
	if n, err := pr.PruneLogs(ctx, dialect.PruneParams{Age: time.Millisecond, Batch: 100}); err != nil || n != 1 {
		t.Fatalf("PruneLogs: %d, %v; want the one ended attempt's row", n, err)
	}
	if logs := db.logs(t, dialect.LogFilter{TaskID: got[0].ID}); len(logs) != 0 {
		t.Fatalf("an ended attempt older than the age after a prune: %+v; want it deleted", logs)
	}
	if logs := db.logs(t, dialect.LogFilter{TaskID: got[1].ID}); len(logs) != 1 {
		t.Fatalf("a running attempt's Logs row after a prune: %d rows; want it kept", len(logs))
	}
	if err := db.finish(ctx, dialect.FinishParams{TaskID: got[1].ID, Token: 30, ProcessID: got[1].ProcessID, Outcome: dialect.OutcomeSucceeded}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := pr.PruneProcesses(ctx, dialect.PruneParams{Age: time.Millisecond, Batch: 100}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.D.ProcessGet(ctx, "default"); err != nil {
		t.Fatalf("the default process after a prune: %v; want it kept", err)
	}
}
