package conformance

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// TestWorkersClaimOnlyTheirKinds (issue 10, item 5): a worker claims only the
// kinds it can run. Plain worker processes (SQL bodies only) drain a queue that
// also holds "report" and "exec" tasks ahead of the SQL ones; those wait with
// their attempts untouched, `queuectl why` names the reason, and an in-process
// worker with a "report" handler then runs them. No attempt fails. Both claim
// paths: without limits, and gated (a limit exists, on another key).
func TestWorkersClaimOnlyTheirKinds(t *testing.T) {
	for _, gated := range []bool{false, true} {
		t.Run(map[bool]string{false: "ungated", true: "gated"}[gated], func(t *testing.T) {
			forEachDialect(t, func(t *testing.T, db *testDB) { claimOnlyTheirKinds(t, db, gated) })
		})
	}
}

func claimOnlyTheirKinds(t *testing.T, db *testDB, gated bool) {
	db.skipOnBabelfish(t, "no claim there (harness_test.go)")
	if gated {
		db.setLimit(t, "elsewhere", 5)
	}
	one := 1
	// The other kinds are enqueued first: they head the claim order.
	p := stages.Plan{Process: "kinds", Stages: []stages.Stage{{Order: &one, Tasks: []stages.Task{
		{Kind: "report", Body: "r1"}, {Kind: "report", Body: "r2"}, {Kind: "exec", Body: "true"},
	}}}}
	res := db.submit(t, p)
	const nSQL = 6
	for i := range nSQL {
		db.enqueue(t, "sqlonly", 1, stages.Task{Body: db.sleepSQL(0.05) + " -- " + strconv.Itoa(i)})
	}
	args := []string{"--concurrency", "2", "--poll-max", "50ms", "--heartbeat", "300ms", "--lease", "2s"}
	a, b := spawnWorker(t, db, args...), spawnWorker(t, db, args...)
	waitFor(t, time.Minute, "the SQL tasks to succeed", func() bool {
		return len(db.logs(t, dialect.LogFilter{Process: "sqlonly", Outcome: dialect.OutcomeSucceeded})) == nSQL
	})
	// Every claim of the SQL workers has walked past the other kinds by now.
	if got := db.logs(t, dialect.LogFilter{Process: "kinds"}); len(got) != 0 {
		t.Fatalf("SQL-only workers started %d attempt(s) of other kinds: %+v", len(got), got)
	}
	tasks := db.tasks(t, dialect.TaskFilter{Process: "kinds"})
	if len(tasks) != 3 {
		t.Fatalf("%d tasks of process kinds left, want 3: %+v", len(tasks), tasks)
	}
	for _, task := range tasks {
		if task.State != dialect.StateAvailable || task.Attempt != 0 {
			t.Errorf("task %d (%s): state %s attempt %d, want available with no attempt", task.ID, task.Kind, task.State, task.Attempt)
		}
	}
	code, out, errOut := runCLI(t, "queuectl", "", "--dsn", db.DSN, "why", strconv.FormatInt(res.TaskIDs[0], 10))
	if code != 0 || !strings.Contains(out, `No live worker runs kind "report"`) {
		t.Errorf("queuectl why of a report task: exit %d:\n%s%s", code, out, errOut)
	}
	a.kill()
	b.kill()

	cfg := fastConfig()
	cfg.Concurrency = 2
	ran := make(chan string, 4)
	startWorkers(t, db, 1, cfg, func(w *queue.Worker) {
		if err := w.Handle("report", func(ctx context.Context, task *queue.Task) error {
			ran <- task.Body
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(w.Kinds(), ","); got != "report,sql" {
			t.Errorf("worker kinds %q, want report,sql (no exec without AllowExec)", got)
		}
	})
	waitFor(t, time.Minute, "the report tasks to succeed", func() bool {
		return len(db.logs(t, dialect.LogFilter{Process: "kinds", Outcome: dialect.OutcomeSucceeded})) == 2
	})
	// The exec task stays: no worker here allows a program.
	time.Sleep(300 * time.Millisecond)
	entries := db.logs(t, dialect.LogFilter{Process: "kinds"})
	for _, e := range entries {
		if e.Kind != "report" || e.Outcome != dialect.OutcomeSucceeded {
			t.Errorf("attempt of task %d (%s): %s %s", e.TaskID, e.Kind, e.Outcome, e.Error)
		}
	}
	if len(entries) != 2 || len(ran) != 2 {
		t.Errorf("%d attempts logged, %d handler runs; want 2 and 2", len(entries), len(ran))
	}
}
