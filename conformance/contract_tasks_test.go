package conformance

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// The task path's methods, each pinned to what dialect/dialect.go documents:
// TaskClaim, TaskFinishMany with StagesAdvance, TaskRescueExpired and the
// worker rows. Registered in TestDialectContract (contract_test.go).

// twoStages submits process with n tasks at order 1 and one at order 2, all
// of kind work and one attempt, and returns the process's id.
func twoStages(t *testing.T, db *testDB, process string, n int) int64 {
	t.Helper()
	sp := dialect.SubmitParams{Process: process}
	for range n {
		sp.Tasks = append(sp.Tasks, dialect.NewTask{Order: 1, Kind: "work", Body: "x", MaxAttempts: 1})
	}
	sp.Tasks = append(sp.Tasks, dialect.NewTask{Order: 2, Kind: "work", Body: "later", MaxAttempts: 1})
	res, err := db.D.Submit(context.Background(), nil, sp)
	if err != nil {
		t.Fatalf("submit %q: %v", process, err)
	}
	return res.ProcessID
}

// claimAs claims up to max tasks for worker with token, failing the test on
// an error.
func claimAs(t *testing.T, db *testDB, worker string, token int64, max int, kinds []string) []dialect.ClaimedTask {
	t.Helper()
	got, err := db.D.TaskClaim(context.Background(), dialect.ClaimParams{WorkerID: worker, Max: max, Token: token,
		Lease: time.Minute, Kinds: kinds})
	if err != nil {
		t.Fatalf("claim (max %d, kinds %v): %v", max, kinds, err)
	}
	return got
}

// finishBatch records ps as the worker does: in one batch where the dialect
// can (BatchFinisher), then, once that committed, the stage advance of the
// processes it names (StageAdvancer). It returns Held.
func finishBatch(t *testing.T, db *testDB, ps ...dialect.FinishParams) []bool {
	t.Helper()
	ctx := context.Background()
	bf, ok := db.D.(dialect.BatchFinisher)
	if !ok {
		held := make([]bool, len(ps))
		for i, fp := range ps {
			err := db.finish(ctx, fp)
			if err != nil && !errors.Is(err, dialect.ErrLeaseLost) {
				t.Fatalf("finish task %d: %v", fp.TaskID, err)
			}
			held[i] = err == nil
		}
		return held
	}
	res, err := bf.TaskFinishMany(ctx, ps)
	if err != nil {
		t.Fatalf("finish a batch of %d: %v", len(ps), err)
	}
	if sa, ok := db.D.(dialect.StageAdvancer); ok && len(res.Advance) > 0 {
		if busy, err := sa.StagesAdvance(ctx, res.Advance); err != nil || len(busy) != 0 {
			t.Fatalf("StagesAdvance: busy %v, %v", busy, err)
		}
	}
	return res.Held
}

// TaskClaim leases at most Max tasks, only of the kinds asked for and only
// of the open stage, each under the claim's token and with its Logs row
// opened for the worker; an empty queue is no error.
func contractTaskClaim(t *testing.T, db *testDB) {
	db.skipOnBabelfish(t, "no claim there (harness_test.go)")
	pid := twoStages(t, db, "c-claim", 3)
	if got := claimAs(t, db, "c-w", 1, 10, []string{"other"}); len(got) != 0 {
		t.Fatalf("a claim for kind other took %d tasks of kind work", len(got))
	}
	got := claimAs(t, db, "c-w", 7, 2, nil)
	if len(got) != 2 {
		t.Fatalf("claim of max 2 took %d tasks", len(got))
	}
	for _, c := range got {
		if c.Token != 7 || c.Attempt != 1 || c.Order != 1 || c.Process != "c-claim" || c.ProcessID != pid ||
			c.Kind != "work" || c.Body != "x" || c.MaxAttempts != 1 {
			t.Errorf("claimed %+v; want token 7, attempt 1 of 1, order 1 of c-claim (id %d), kind work, body x", c, pid)
		}
	}
	logs := db.logs(t, dialect.LogFilter{Process: "c-claim"})
	if len(logs) != 2 {
		t.Fatalf("Logs after claiming 2: %d rows; want one per attempt", len(logs))
	}
	for _, l := range logs {
		if l.Outcome != dialect.OutcomeRunning || l.WorkerID != "c-w" || l.Attempt != 1 || l.EndedAt != nil ||
			!slices.ContainsFunc(got, func(c dialect.ClaimedTask) bool { return c.ID == l.TaskID }) {
			t.Errorf("Logs row %+v; want a running attempt 1 of a claimed task, by c-w, not ended", l)
		}
	}
	rest := claimAs(t, db, "c-w", 8, 10, nil)
	if len(rest) != 1 || rest[0].Order != 1 {
		t.Fatalf("the next claim took %+v; want the third order-1 task only (order 2 waits for order 1)", rest)
	}
	if more := claimAs(t, db, "c-w", 9, 10, nil); len(more) != 0 {
		t.Fatalf("with every order-1 task running a claim took %+v; want nothing", more)
	}
	for _, tk := range db.tasks(t, dialect.TaskFilter{Process: "c-claim"}) {
		want := dialect.StateRunning
		if tk.Order == 2 {
			want = dialect.StateBlocked
		}
		if tk.State != want {
			t.Errorf("task %d (order %d) is %s; want %s", tk.ID, tk.Order, tk.State, want)
		}
	}
}

// TaskFinishMany fences each attempt by its own token (Held), and a batch
// that ends a stage names its process in Advance where the dialect advances
// after the commit; StagesAdvance then opens the next stage, and doing so
// again changes nothing.
func contractTaskFinishMany(t *testing.T, db *testDB) {
	db.skipOnBabelfish(t, "no claim there (harness_test.go)")
	bf, ok := db.D.(dialect.BatchFinisher)
	if !ok {
		t.Skipf("%s records ends one at a time", db.Dialect)
	}
	ctx := context.Background()
	pid := twoStages(t, db, "c-many", 2)
	got := claimAs(t, db, "w", 3, 10, nil)
	if len(got) != 2 {
		t.Fatalf("claimed %d; want the 2 order-1 tasks", len(got))
	}
	ok1 := dialect.FinishParams{TaskID: got[0].ID, Token: 3, ProcessID: pid, Outcome: dialect.OutcomeSucceeded}
	wrong := dialect.FinishParams{TaskID: got[1].ID, Token: 4, ProcessID: pid, Outcome: dialect.OutcomeSucceeded}
	res, err := bf.TaskFinishMany(ctx, []dialect.FinishParams{ok1, wrong})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Held, []bool{true, false}) {
		t.Fatalf("Held = %v; want [true false] (the second token is not the claim's)", res.Held)
	}
	if running := db.tasks(t, dialect.TaskFilter{Process: "c-many", State: dialect.StateRunning}); len(running) != 1 || running[0].ID != got[1].ID {
		t.Fatalf("running after the batch: %+v; want only the task whose finish was fenced off", running)
	}
	last := dialect.FinishParams{TaskID: got[1].ID, Token: 3, ProcessID: pid, Outcome: dialect.OutcomeSucceeded}
	res, err = bf.TaskFinishMany(ctx, []dialect.FinishParams{last})
	if err != nil || !slices.Equal(res.Held, []bool{true}) {
		t.Fatalf("finish the stage's last task: %+v, %v", res, err)
	}
	if sa, ok := db.D.(dialect.StageAdvancer); ok {
		if !slices.Contains(res.Advance, pid) {
			t.Fatalf("the batch that ended order 1 gave Advance %v; want it to name process %d", res.Advance, pid)
		}
		for range 2 {
			busy, err := sa.StagesAdvance(ctx, res.Advance)
			if err != nil || len(busy) != 0 {
				t.Fatalf("StagesAdvance: busy %v, %v", busy, err)
			}
		}
		if busy, err := sa.StagesAdvance(ctx, []int64{pid + 1_000_000}); err != nil || len(busy) != 0 {
			t.Fatalf("StagesAdvance of a process that does not exist: busy %v, %v; want nothing to do", busy, err)
		}
	}
	next := claimAs(t, db, "w", 5, 10, nil)
	if len(next) != 1 || next[0].Order != 2 {
		t.Fatalf("after order 1 ended the claim took %+v; want the one order-2 task (once: advancing twice opens nothing more)", next)
	}
	logs := db.logs(t, dialect.LogFilter{Process: "c-many", Outcome: dialect.OutcomeSucceeded})
	if len(logs) != 2 {
		t.Fatalf("succeeded Logs rows: %d; want 2, one per order-1 task (the fenced-off finish wrote nothing)", len(logs))
	}

	// One batch that fails a task for good and succeeds another of the same
	// process, a third still running: the process is failed, and once the
	// third succeeds the failed task still holds order 2 back.
	mixed := twoStages(t, db, "c-mixed", 3)
	got = claimAs(t, db, "w", 6, 10, nil)
	if len(got) != 3 {
		t.Fatalf("claimed %d of c-mixed; want its 3 order-1 tasks", len(got))
	}
	end := func(c dialect.ClaimedTask, o dialect.Outcome) dialect.FinishParams {
		return dialect.FinishParams{TaskID: c.ID, Token: c.Token, ProcessID: mixed, Outcome: o, Error: "boom"}
	}
	if held := finishBatch(t, db, end(got[0], dialect.OutcomeFailed), end(got[1], dialect.OutcomeSucceeded)); !slices.Equal(held, []bool{true, true}) {
		t.Fatalf("Held = %v", held)
	}
	if p, err := db.D.ProcessGet(ctx, "c-mixed"); err != nil || p.State != dialect.ProcessFailed {
		t.Fatalf("after a batch with a task failed for good: %+v, %v; want the process failed", p, err)
	}
	finishBatch(t, db, end(got[2], dialect.OutcomeSucceeded))
	if next := claimAs(t, db, "w", 7, 10, nil); len(next) != 0 {
		t.Fatalf("with order 1's failed task left the claim took %+v; want nothing (a failed task blocks later orders)", next)
	}
	if p, err := db.D.ProcessGet(ctx, "c-mixed"); err != nil || p.State != dialect.ProcessFailed || p.CurrentOrder == nil || *p.CurrentOrder != 1 {
		t.Fatalf("after the stage's last success: %+v, %v; want still failed, at order 1", p, err)
	}

	// The same with a success that carries no error text (SQLite ends those
	// of a batch together, in one statement), and beside it a stale finish of
	// that very task under a token it does not hold: each entry is fenced by
	// its own pair of task and token.
	plain := twoStages(t, db, "c-plain", 2)
	got = claimAs(t, db, "w", 8, 10, nil)
	if len(got) != 2 {
		t.Fatalf("claimed %d of c-plain; want its 2 order-1 tasks", len(got))
	}
	stale := dialect.FinishParams{TaskID: got[1].ID, Token: 99, ProcessID: plain, Outcome: dialect.OutcomeSucceeded}
	failed := dialect.FinishParams{TaskID: got[0].ID, Token: got[0].Token, ProcessID: plain, Outcome: dialect.OutcomeFailed, Error: "boom"}
	success := dialect.FinishParams{TaskID: got[1].ID, Token: got[1].Token, ProcessID: plain, Outcome: dialect.OutcomeSucceeded}
	if held := finishBatch(t, db, stale, failed, success); !slices.Equal(held, []bool{false, true, true}) {
		t.Fatalf("Held = %v; want [false true true] (the first names a token the task does not hold)", held)
	}
	if p, err := db.D.ProcessGet(ctx, "c-plain"); err != nil || p.State != dialect.ProcessFailed {
		t.Fatalf("after a batch with a task failed for good: %+v, %v; want the process failed", p, err)
	}
	for outcome, want := range map[dialect.Outcome]int64{dialect.OutcomeSucceeded: got[1].ID, dialect.OutcomeFailed: got[0].ID} {
		if l := db.logs(t, dialect.LogFilter{Process: "c-plain", Outcome: outcome}); len(l) != 1 || l[0].TaskID != want {
			t.Fatalf("%s Logs rows of c-plain: %+v; want one, of task %d", outcome, l, want)
		}
	}
	if running := db.tasks(t, dialect.TaskFilter{Process: "c-plain", State: dialect.StateRunning}); len(running) != 0 {
		t.Fatalf("running after the batch: %+v; want none", running)
	}

	// Two ends of one attempt in one batch take effect in the batch's order:
	// the hand-back holds, and the success after it finds the task no longer
	// running under that token.
	twice := twoStages(t, db, "c-twice", 1)
	got = claimAs(t, db, "w", 9, 1, nil)
	if len(got) != 1 {
		t.Fatalf("claimed %d of c-twice; want 1", len(got))
	}
	back := dialect.FinishParams{TaskID: got[0].ID, Token: got[0].Token, ProcessID: twice, Outcome: dialect.OutcomeReleased}
	done := dialect.FinishParams{TaskID: got[0].ID, Token: got[0].Token, ProcessID: twice, Outcome: dialect.OutcomeSucceeded}
	if held := finishBatch(t, db, back, done); !slices.Equal(held, []bool{true, false}) {
		t.Fatalf("Held = %v; want [true false] (the hand-back first)", held)
	}
	if waiting := db.tasks(t, dialect.TaskFilter{Process: "c-twice", State: dialect.StateAvailable}); len(waiting) != 1 || waiting[0].ID != got[0].ID {
		t.Fatalf("available after the batch: %+v; want the task handed back", waiting)
	}
}

// TaskRescueExpired hands back tasks whose lease expired, at most Max a
// pass, closing their attempts abandoned without charging max_attempts; the
// expired token no longer finishes anything.
func contractTaskRescueExpired(t *testing.T, db *testDB) {
	db.skipOnBabelfish(t, "no claim there (harness_test.go)")
	ctx := context.Background()
	twoStages(t, db, "c-rescue", 2)
	got, err := db.D.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "gone", Max: 10, Token: 11, Lease: 50 * time.Millisecond})
	if err != nil || len(got) != 2 {
		t.Fatalf("claim: %d, %v", len(got), err)
	}
	// Both leases expire together; the first pass that finds them takes one.
	waitFor(t, 10*time.Second, "a rescue pass of max 1 to find an expired lease", func() bool {
		n, err := db.D.TaskRescueExpired(ctx, dialect.RescueParams{Max: 1})
		if err != nil || n > 1 {
			t.Fatalf("rescue of max 1: %d, %v", n, err)
		}
		return n == 1
	})
	if n, err := db.D.TaskRescueExpired(ctx, dialect.RescueParams{Max: 1}); err != nil || n != 1 {
		t.Fatalf("the second pass of max 1: %d, %v; want the other expired lease", n, err)
	}
	if n, err := db.D.TaskRescueExpired(ctx, dialect.RescueParams{Max: 10}); err != nil || n != 0 {
		t.Fatalf("a rescue with nothing expired: %d, %v; want 0", n, err)
	}
	for _, tk := range db.tasks(t, dialect.TaskFilter{Process: "c-rescue"}) {
		if tk.Order == 1 && (tk.State != dialect.StateAvailable || tk.Abandons != 1) {
			t.Errorf("rescued task %d is %s with %d abandons; want available again, 1 abandon (not one of its max_attempts)",
				tk.ID, tk.State, tk.Abandons)
		}
		if tk.Order != 1 {
			continue
		}
		// The task page and queuectl why read the task on their own.
		if w, err := db.D.(dialect.Inspector).TaskWait(ctx, tk.ID, time.Minute); err != nil || w.Task.Abandons != 1 {
			t.Errorf("TaskWait of rescued task %d: %d abandons, %v; want 1", tk.ID, w.Task.Abandons, err)
		}
	}
	logs := db.logs(t, dialect.LogFilter{Process: "c-rescue"})
	if len(logs) != 2 || countOutcome(logs, dialect.OutcomeAbandoned) != 2 {
		t.Fatalf("Logs: %+v; want the two attempts closed abandoned", logs)
	}
	err = db.D.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: got[0].ID, Token: 11, Outcome: dialect.OutcomeSucceeded})
	if !errors.Is(err, dialect.ErrLeaseLost) {
		t.Fatalf("finish with the rescued token: %v; want ErrLeaseLost", err)
	}
	again := claimAs(t, db, "w", 12, 10, nil)
	if len(again) != 2 || again[0].Attempt != 2 {
		t.Fatalf("claim after the rescue: %+v; want both tasks again, as attempt 2", again)
	}
}

// Workers: WorkerRegister inserts or takes over a row (a stopped worker that
// registers again is live, with its new host, pid, version and start), WorkerList counts the tasks each holds, and
// WorkerStop marks it stopped.
func contractWorkers(t *testing.T, db *testDB) {
	ctx := context.Background()
	op := limOperator(t, db)
	info := dialect.WorkerInfo{ID: "c-worker", Hostname: "host-1", PID: 4242, Concurrency: 3, Version: "v-test"}
	if err := db.D.WorkerRegister(ctx, info); err != nil {
		t.Fatal(err)
	}
	find := func() dialect.WorkerStatus {
		t.Helper()
		ws, err := op.WorkerList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if w.ID == info.ID {
				return w
			}
		}
		t.Fatalf("WorkerList %+v has no %s", ws, info.ID)
		return dialect.WorkerStatus{}
	}
	w := find()
	if w.Hostname != "host-1" || w.PID != 4242 || w.Concurrency != 3 || w.Version != "v-test" || w.StoppedAt != nil ||
		w.HeartbeatAt.IsZero() || w.Running != 0 {
		t.Fatalf("registered worker reads %+v", w)
	}
	time.Sleep(20 * time.Millisecond) // past the clocks' resolution (SQLite's: a millisecond)
	if err := db.D.WorkerHeartbeat(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if after := find(); !after.HeartbeatAt.After(w.HeartbeatAt) {
		t.Fatalf("heartbeat at %v after WorkerHeartbeat; want later than %v", after.HeartbeatAt, w.HeartbeatAt)
	}
	if !db.Babelfish {
		submitOneTask(t, db, "c-workers")
		claimAs(t, db, info.ID, 1, 10, nil)
		if w := find(); w.Running != 1 {
			t.Errorf("worker holding one task: running %d", w.Running)
		}
	}
	if err := db.D.WorkerStop(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if w := find(); w.StoppedAt == nil {
		t.Fatalf("after WorkerStop: %+v; want stopped_at set", w)
	}
	// Started again under its id (a service's restart): the row is the new
	// process's.
	first := find()
	time.Sleep(20 * time.Millisecond)
	info.Concurrency, info.Hostname, info.PID, info.Version = 5, "host-2", 4343, "v-next"
	if err := db.D.WorkerRegister(ctx, info); err != nil {
		t.Fatalf("register again: %v", err)
	}
	if w := find(); w.StoppedAt != nil || w.Concurrency != 5 || w.Hostname != "host-2" || w.PID != 4343 ||
		w.Version != "v-next" || !w.StartedAt.After(first.StartedAt) {
		t.Fatalf("registered again: %+v; want live (no stopped_at), concurrency 5, host-2, pid 4343, v-next, started after %v",
			w, first.StartedAt)
	}
}

// A batch that fails reports, beside its error, exactly the ends it recorded
// (FinishResult.Committed): a dialect that splits a batch into transactions
// (PostgreSQL's and SQL Server's rounds when a task is named twice, SQL
// Server's chunks of 500) has committed the parts before the failure, and the
// worker must not send those again, nor forget the stages they ended. Each
// case ends with an outcome no dialect knows, after the ends that should stick.
func contractTaskFinishManyPartly(t *testing.T, db *testDB) {
	db.skipOnBabelfish(t, "no claim there (harness_test.go)")
	bf, ok := db.D.(dialect.BatchFinisher)
	if !ok {
		t.Skipf("%s records ends one at a time", db.Dialect)
	}
	splits := db.Dialect == "postgres" || db.Dialect == "sqlserver" // rounds
	// Rounds: task a named twice, the second time in a round of its own.
	pid := twoStages(t, db, "c-partly", 2)
	got := claimAs(t, db, "w", 3, 10, nil)
	if len(got) != 2 {
		t.Fatalf("claimed %d; want the 2 order-1 tasks", len(got))
	}
	a := got[0]
	res, err := finishPartly(t, db, bf, "c-partly", got, dialect.FinishParams{TaskID: a.ID, Token: 9, ProcessID: pid})
	if splits && !(res.Recorded(0, err) && res.Recorded(1, err)) {
		t.Errorf("%s runs a task's second end in a round of its own, after the round that ended a and b; "+
			"want a and b reported recorded, got %+v (%v)", db.Dialect, res, err)
	}
	if res.Recorded(0, err) && res.Recorded(1, err) {
		// Both of order 1 ended: the result must name the process, so that
		// the worker opens order 2 although the batch failed.
		if _, ok := db.D.(dialect.StageAdvancer); ok && !slices.Contains(res.Advance, pid) {
			t.Errorf("order 1 ended in the part that committed, but Advance = %v does not name process %d", res.Advance, pid)
		}
	}

	// Chunks: 501 tasks, the last end unknown. SQL Server records the first
	// 500 in a chunk of their own; PostgreSQL and SQLite, one statement or one
	// transaction, record none.
	big := twoStages(t, db, "c-partly-big", 501)
	// A claim may return fewer than it was asked (SQL Server's hands out 500
	// at most): claim again, each time with a new token, until all 501 are
	// held.
	got = nil
	for token := int64(4); len(got) < 501; token++ {
		more := claimAs(t, db, "w", token, 600-len(got), nil)
		if len(more) == 0 {
			break
		}
		got = append(got, more...)
	}
	if len(got) != 501 {
		t.Fatalf("claimed %d; want the 501 order-1 tasks of c-partly-big", len(got))
	}
	last := got[500]
	res, err = finishPartly(t, db, bf, "c-partly-big", got[:500], dialect.FinishParams{TaskID: last.ID, Token: last.Token, ProcessID: big})
	if db.Dialect == "sqlserver" && !res.Recorded(0, err) {
		t.Errorf("SQL Server ends a batch in chunks of 500; want the first chunk reported recorded, got %v", err)
	}
}

// finishPartly ends claimed (each by its claim's token, succeeded) and then
// bad, given an outcome no dialect knows, in one batch; checks that the batch
// fails, that bad is not reported recorded, and that exactly the ends reported
// recorded took effect (and were held); returns the result.
func finishPartly(t *testing.T, db *testDB, bf dialect.BatchFinisher, process string, claimed []dialect.ClaimedTask, bad dialect.FinishParams) (dialect.FinishResult, error) {
	t.Helper()
	var ps []dialect.FinishParams
	for _, c := range claimed {
		ps = append(ps, dialect.FinishParams{TaskID: c.ID, Token: c.Token, ProcessID: c.ProcessID, Outcome: dialect.OutcomeSucceeded})
	}
	bad.Outcome = dialect.Outcome("exploded")
	ps = append(ps, bad)
	res, err := bf.TaskFinishMany(context.Background(), ps)
	if err == nil {
		t.Fatalf("a batch with an unknown outcome was recorded: %+v", res)
	}
	if res.Recorded(len(ps)-1, err) {
		t.Fatalf("the end with an unknown outcome is reported recorded: %+v", res)
	}
	running := map[int64]bool{}
	for _, ti := range db.tasks(t, dialect.TaskFilter{Process: process, State: dialect.StateRunning}) {
		running[ti.ID] = true
	}
	recorded := 0
	for i, c := range claimed {
		switch r := res.Recorded(i, err); {
		case r == running[c.ID]:
			t.Errorf("task %d: reported recorded %v, but running %v after the batch (%v)", c.ID, r, running[c.ID], err)
		case r && !res.Held[i]:
			t.Errorf("task %d: recorded by its claim's token, but Held is false", c.ID)
		case r:
			recorded++
		}
	}
	t.Logf("%s, %s: %d of %d ends recorded before the failure (%v)", db.Dialect, process, recorded, len(claimed), err)
	return res, err
}
