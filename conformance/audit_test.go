package conformance

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// TestOperatorAudit (issue 10, items 3 and 4), on every dialect: queuectl cancel,
// discard and retry, process-wide and per task, leave one Logs row per task they
// change (outcome, who, when, the attempt the task had); a process that a cancel
// or discard emptied ends 'cancelled', one that still holds a task that failed
// for good stays 'failed', and new tasks make a cancelled process active again.
// No worker runs: every task waits an hour unless the test claims it itself.
func TestOperatorAudit(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		who := "auditor@" + db.Dialect
		qc := func(want int, args ...string) string {
			t.Helper()
			code, out, stderr := runCLIAs(t, who, "queuectl", append([]string{"--dsn", db.DSN}, args...)...)
			if code != want {
				t.Fatalf("queuectl %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, out, stderr)
			}
			return out + stderr
		}
		enqueue := func(process string, order int, body string, maxAttempts int, delay time.Duration) {
			t.Helper()
			db.enqueue(t, process, order, stages.Task{Body: body, MaxAttempts: maxAttempts, Delay: stages.Duration(delay)})
		}
		state := func(process string) string {
			t.Helper()
			p, err := db.D.ProcessGet(ctx, process)
			if err != nil {
				t.Fatalf("process %s: %v", process, err)
			}
			return p.State
		}
		audit := func(process string, o dialect.Outcome) []dialect.LogEntry {
			t.Helper()
			return db.logs(t, dialect.LogFilter{Process: process, Outcome: o})
		}
		taskIDs := func(process string) []int64 {
			t.Helper()
			tasks := db.tasks(t, dialect.TaskFilter{Process: process})
			var ids []int64
			for _, tk := range tasks {
				ids = append(ids, tk.ID)
			}
			return ids
		}
		token := int64(1000)
		failForGood := func(process string) int64 {
			t.Helper()
			token++
			got, err := db.D.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w-audit", Max: 1, Token: token, Lease: time.Minute})
			if err != nil || len(got) != 1 || got[0].Process != process {
				t.Fatalf("claim a task of %s: %+v, %v", process, got, err)
			}
			if err := db.finish(ctx, dialect.FinishParams{TaskID: got[0].ID, Token: token,
				Outcome: dialect.OutcomeFailed, Error: "boom"}); err != nil {
				t.Fatalf("fail task %d: %v", got[0].ID, err)
			}
			return got[0].ID
		}
		checkRows := func(what string, rows []dialect.LogEntry, process string, n int, since time.Time) {
			t.Helper()
			if len(rows) != n {
				t.Fatalf("%s: %d Logs rows, want %d: %+v", what, len(rows), n, rows)
			}
			for _, r := range rows {
				if r.WorkerID != who || r.Process != process || r.Body == "" || r.StartedAt.Before(since) ||
					r.EndedAt == nil || r.EndedAt.Before(r.StartedAt) {
					t.Errorf("%s: row %+v; want worker_id %q, process %s, the task's body, a time", what, r, who, process)
				}
			}
		}
		since := time.Now().Add(-time.Minute) // clocks of test and database may differ a little

		// A whole process cancelled: one row per task removed; it ends cancelled
		// and leaves `status` (listed with --all).
		enqueue("cx", 0, "SELECT 1", 0, time.Hour)
		enqueue("cx", 5, "SELECT 2", 0, time.Hour)
		if out := qc(0, "cancel", "--process", "cx"); !strings.Contains(out, "2 task(s)") {
			t.Errorf("cancel --process cx says %q, want 2 task(s)", out)
		}
		checkRows("cancel --process", audit("cx", dialect.OutcomeCancelled), "cx", 2, since)
		if got := state("cx"); got != dialect.ProcessCancelled {
			t.Errorf("process cx is %q after cancel, want cancelled", got)
		}
		if out := qc(0, "status"); strings.Contains(out, "cx") {
			t.Errorf("a cancelled process is listed without --all:\n%s", out)
		}
		if out := qc(0, "status", "--all"); !strings.Contains(out, "cx") {
			t.Errorf("a cancelled process is not listed with --all:\n%s", out)
		}
		// Nothing left to cancel: refused (exit 4), no row, still cancelled.
		qc(4, "cancel", "--process", "cx")
		if n := len(audit("cx", dialect.OutcomeCancelled)); n != 2 || state("cx") != dialect.ProcessCancelled {
			t.Errorf("a refused cancel changed cx: %d rows, state %q", n, state("cx"))
		}

		// One failed task retried (the row keeps the attempt it failed), then
		// discarded: the process it emptied ends cancelled.
		enqueue("dx", 0, "SELECT 3", 1, 0)
		id := failForGood("dx")
		if got := state("dx"); got != dialect.ProcessFailed {
			t.Fatalf("process dx is %q with a task failed for good, want failed", got)
		}
		qc(0, "retry", strconv.FormatInt(id, 10))
		rows := audit("dx", dialect.OutcomeRetried)
		checkRows("retry", rows, "dx", 1, since)
		if rows[0].TaskID != id || rows[0].Attempt != 1 {
			t.Errorf("retry row: task %d attempt %d, want task %d attempt 1", rows[0].TaskID, rows[0].Attempt, id)
		}
		if got := state("dx"); got != dialect.ProcessActive {
			t.Errorf("process dx is %q after retry, want active", got)
		}
		failForGood("dx")
		qc(0, "discard", strconv.FormatInt(id, 10))
		rows = audit("dx", dialect.OutcomeDiscarded)
		checkRows("discard", rows, "dx", 1, since)
		if rows[0].TaskID != id {
			t.Errorf("discard row names task %d, want %d", rows[0].TaskID, id)
		}
		if got := state("dx"); got != dialect.ProcessCancelled {
			t.Errorf("process dx is %q after its last task was discarded, want cancelled", got)
		}

		// Two tasks failed for good; discarding one leaves the process failed;
		// retrying the process's failed tasks audits the other and revives it.
		enqueue("fx", 0, "SELECT 4", 1, 0)
		enqueue("fx", 0, "SELECT 5", 1, 0)
		first := failForGood("fx")
		second := failForGood("fx")
		qc(0, "discard", strconv.FormatInt(first, 10))
		if got := state("fx"); got != dialect.ProcessFailed {
			t.Errorf("process fx is %q with one task still failed for good, want failed", got)
		}
		if out := qc(0, "retry", "--process", "fx"); !strings.Contains(out, "1 failed task(s)") {
			t.Errorf("retry --process fx says %q, want 1 failed task(s)", out)
		}
		rows = audit("fx", dialect.OutcomeRetried)
		checkRows("retry --process", rows, "fx", 1, since)
		if rows[0].TaskID != second || rows[0].Attempt != 1 {
			t.Errorf("retry --process row: task %d attempt %d, want task %d attempt 1", rows[0].TaskID, rows[0].Attempt, second)
		}
		checkRows("discard (fx)", audit("fx", dialect.OutcomeDiscarded), "fx", 1, since)
		if got := state("fx"); got != dialect.ProcessActive {
			t.Errorf("process fx is %q after retry --process, want active", got)
		}
		// A process-wide discard of its failed tasks is audited too.
		failForGood("fx")
		if out := qc(0, "discard", "--process", "fx"); !strings.Contains(out, "1 failed task(s)") {
			t.Errorf("discard --process fx says %q, want 1 failed task(s)", out)
		}
		checkRows("discard --process", audit("fx", dialect.OutcomeDiscarded), "fx", 2, since)
		if got := state("fx"); got != dialect.ProcessCancelled {
			t.Errorf("process fx is %q after its failed tasks were discarded, want cancelled", got)
		}

		// One task of two cancelled: the process stays active.
		enqueue("tx", 0, "SELECT 6", 0, time.Hour)
		enqueue("tx", 0, "SELECT 7", 0, time.Hour)
		ids := taskIDs("tx")
		if len(ids) != 2 {
			t.Fatalf("tx has tasks %v, want 2", ids)
		}
		qc(0, "cancel", strconv.FormatInt(ids[0], 10))
		rows = audit("tx", dialect.OutcomeCancelled)
		checkRows("cancel one task", rows, "tx", 1, since)
		if rows[0].TaskID != ids[0] {
			t.Errorf("cancel row names task %d, want %d", rows[0].TaskID, ids[0])
		}
		if got := state("tx"); got != dialect.ProcessActive {
			t.Errorf("process tx is %q with a task left, want active", got)
		}

		// New tasks make a cancelled process active again.
		enqueue("cx", 0, "SELECT 8", 0, time.Hour)
		if got := state("cx"); got != dialect.ProcessActive {
			t.Errorf("process cx is %q after a new task, want active", got)
		}
	})
}

// runCLIAs is runCLI with STAGEQ_ACTOR set, the name queuectl records as who
// performed an operator action (the subtests run in parallel, so the test's own
// environment cannot carry it).
func runCLIAs(t *testing.T, actor, name string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCLIEnv(t, []string{"STAGEQ_ACTOR=" + actor}, name, "", args...)
}

// TestCancelWhileRunning: a process cancelled while one of its tasks runs
// ends 'cancelled' once that task has ended, though it succeeded, and the
// stage above never runs (it ended 'succeeded' before, so enqueue --wait
// exited 0 for it). New tasks make it active again; then it ends 'succeeded'.
func TestCancelWhileRunning(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		db.enqueue(t, "cx", 1, stages.Task{Kind: "hold", Body: "runs"})
		db.enqueue(t, "cx", 2, stages.Task{Kind: "hold", Body: "cancelled"})
		started := make(chan string, 4)
		release := make(chan struct{})
		var ran atomic.Int64
		startWorkers(t, db, 1, fastConfig(), func(w *queue.Worker) {
			w.Handle("hold", func(ctx context.Context, task *queue.Task) error {
				ran.Add(1)
				started <- task.Body
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		})
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the first task never started")
		}
		removed, running, err := limOperator(t, db).ProcessCancel(ctx, "cx")
		if err != nil || removed != 1 || running != 1 {
			t.Fatalf("cancel: %d removed, %d running, %v; want 1 and 1", removed, running, err)
		}
		state := func() string {
			p, err := db.D.ProcessGet(ctx, "cx")
			if err != nil {
				t.Fatal(err)
			}
			return p.State
		}
		if s := state(); s != dialect.ProcessActive {
			t.Fatalf("while its task runs the process is %q, want active", s)
		}
		close(release)
		waitFor(t, 30*time.Second, "the process to end", func() bool { return state() != dialect.ProcessActive })
		if s := state(); s != dialect.ProcessCancelled || ran.Load() != 1 {
			t.Fatalf("after its running task succeeded: process %q, %d tasks ran; want cancelled, 1", s, ran.Load())
		}

		db.enqueue(t, "cx", 1, stages.Task{Kind: "hold", Body: "again"})
		waitFor(t, 30*time.Second, "the new task to run", func() bool { return state() != dialect.ProcessActive })
		if s := state(); s != dialect.ProcessSucceeded {
			t.Errorf("after new tasks ran: process %q, want succeeded", s)
		}
	})
}

// TestCancelWaitingForItsProcessStillEndsCancelled (PostgreSQL): a cancel
// waits for its process's row, held by an application's open submission,
// while a worker claims and starts a task of that process (claims take no
// process lock). Once the row is free the cancel removes what waits and
// audits it; when the started task ends the process is empty and must end
// cancelled: the audit rows are the newest in Logs. Before, they were dated
// when the cancel's transaction began, before the wait, so the attempt
// started during the wait looked newer and the process ended succeeded.
func TestCancelWaitingForItsProcessStillEndsCancelled(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t, newPostgresDB(t))
	twoStages(t, db, "cw", 1)
	one := 1
	held := db.holdSubmission(t, stages.Plan{Process: "cw", Stages: []stages.Stage{{Order: &one, Tasks: []stages.Task{{Kind: "work", Body: "held"}}}}})
	defer held.Rollback()

	cancelled := make(chan error, 1)
	go func() {
		_, _, err := limOperator(t, db).ProcessCancel(ctx, "cw")
		cancelled <- err
	}()
	waitFor(t, 10*time.Second, "the cancel to wait for the process row", func() bool {
		return db.count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) == 1
	})
	time.Sleep(20 * time.Millisecond) // a clock tick between the cancel's start and the attempt's
	got := claimAs(t, db, "w", 1, 10, nil)
	if len(got) != 1 || got[0].Body != "x" {
		t.Fatalf("claimed %+v while the cancel waited; want the committed stage-1 task", got)
	}
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-cancelled; err != nil {
		t.Fatalf("cancel: %v", err)
	}
	finishBatch(t, db, dialect.FinishParams{TaskID: got[0].ID, Token: 1, ProcessID: got[0].ProcessID, Outcome: dialect.OutcomeSucceeded})
	p, err := db.D.ProcessGet(ctx, "cw")
	if err != nil || p.State != dialect.ProcessCancelled {
		t.Fatalf("after the task that ran during the cancel's wait ended: %+v, %v; want cancelled", p, err)
	}
}
