package cli

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// TestOperatorActionsAudited: cancel, discard and retry leave a Logs row per task
// (outcome, who, when); a process that a cancel or discard emptied ends
// 'cancelled', and following it exits 5 (issue 10, items 3 and 4).
func TestOperatorActionsAudited(t *testing.T) {
	qcDatabases(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		who := operatorName()
		d := qcDialect(t, dsn)
		logs := func(process string, o dialect.Outcome) []dialect.LogEntry {
			t.Helper()
			entries, err := d.LogList(ctx, dialect.LogFilter{Process: process, Outcome: o})
			if err != nil {
				t.Fatal(err)
			}
			return entries
		}
		state := func(process string) string {
			t.Helper()
			var ps []dialect.ProcessStatus
			if err := json.Unmarshal([]byte(qcExpect(t, dsn, 0, "", "status", process, "--json")), &struct {
				Processes *[]dialect.ProcessStatus `json:"processes"`
			}{&ps}); err != nil || len(ps) != 1 {
				t.Fatalf("status %s: %v %v", process, ps, err)
			}
			return ps[0].State
		}
		failForGood := func(process string) int64 {
			t.Helper()
			got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w1", Max: 1, Token: 5, Lease: time.Minute})
			if err != nil || len(got) != 1 || got[0].Process != process {
				t.Fatalf("claim: %+v, %v", got, err)
			}
			if err := d.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: got[0].ID, Token: 5, Outcome: dialect.OutcomeFailed, Error: "boom"}); err != nil {
				t.Fatal(err)
			}
			return got[0].ID
		}

		// Cancel a whole process while `enqueue --wait` follows it.
		waited := make(chan [3]string, 1)
		go func() {
			code, out, errOut := qc(t, dsn, "enqueue", "--process", "cx", "--delay", "1h", "--wait", "SELECT 1")
			waited <- [3]string{string(rune('0' + code)), out, errOut}
		}()
		for !strings.Contains(qcExpect(t, dsn, 0, "", "tasks", "--process", "cx"), "SELECT 1") {
			time.Sleep(20 * time.Millisecond)
		}
		qcExpect(t, dsn, 0, "", "enqueue", "--process", "cx", "--order", "5", "SELECT 2")
		before := time.Now().Add(-time.Minute)
		qcExpect(t, dsn, 0, "2 task(s)", "cancel", "--process", "cx")
		if w := <-waited; w[0] != "5" || !strings.Contains(w[2], "cancelled") {
			t.Errorf("enqueue --wait on a cancelled process: exit %s, stderr %q", w[0], w[2])
		}
		if got := state("cx"); got != dialect.ProcessCancelled {
			t.Errorf("process cx is %q after cancel, want cancelled", got)
		}
		qcExpect(t, dsn, ExitProcessFailed, "cancelled", "status", "cx", "--watch")
		rows := logs("cx", dialect.OutcomeCancelled)
		if len(rows) != 2 {
			t.Fatalf("cancel wrote %d Logs rows, want 2: %+v", len(rows), rows)
		}
		for _, r := range rows {
			if r.WorkerID != who || r.StartedAt.Before(before) || r.EndedAt == nil || r.Process != "cx" || r.Body == "" {
				t.Errorf("cancel row: %+v (want worker_id %q, a time, the task)", r, who)
			}
		}
		if out := qcExpect(t, dsn, 0, "", "status"); strings.Contains(out, "cx") {
			t.Errorf("a cancelled process is listed without --all:\n%s", out)
		}

		// Retry, then discard, one failed task.
		qcExpect(t, dsn, 0, "", "enqueue", "--process", "dx", "--max-attempts", "1", "SELECT 3")
		id := failForGood("dx")
		qcExpect(t, dsn, 0, "will run again", "retry", itoa(id))
		if r := logs("dx", dialect.OutcomeRetried); len(r) != 1 || r[0].TaskID != id || r[0].WorkerID != who || r[0].Attempt != 1 {
			t.Errorf("retry rows: %+v", r)
		}
		if got := state("dx"); got != dialect.ProcessActive {
			t.Errorf("process dx is %q after retry", got)
		}
		failForGood("dx")
		qcExpect(t, dsn, 0, "discarded", "discard", itoa(id))
		if r := logs("dx", dialect.OutcomeDiscarded); len(r) != 1 || r[0].TaskID != id || r[0].WorkerID != who {
			t.Errorf("discard rows: %+v", r)
		}
		if got := state("dx"); got != dialect.ProcessCancelled {
			t.Errorf("process dx is %q after its last task was discarded, want cancelled", got)
		}
		qcExpect(t, dsn, 0, "", "logs", "--outcome", "discarded")

		// Cancelling one task of several leaves the process active; new tasks
		// make a cancelled process active again.
		qcExpect(t, dsn, 0, "", "enqueue", "--process", "tx", "--delay", "1h", "SELECT 4")
		qcExpect(t, dsn, 0, "", "enqueue", "--process", "tx", "--delay", "1h", "SELECT 5")
		tasks, err := d.TaskList(ctx, dialect.TaskFilter{Process: "tx"})
		if err != nil || len(tasks) != 2 {
			t.Fatal(tasks, err)
		}
		qcExpect(t, dsn, 0, "cancelled", "cancel", itoa(tasks[0].ID))
		if got := state("tx"); got != dialect.ProcessActive || len(logs("tx", dialect.OutcomeCancelled)) != 1 {
			t.Errorf("tx after one cancel: %q", got)
		}
		qcExpect(t, dsn, 0, "", "enqueue", "--process", "cx", "--delay", "1h", "SELECT 6")
		if got := state("cx"); got != dialect.ProcessActive {
			t.Errorf("cx after a new task: %q, want active", got)
		}
	})
}

func itoa(id int64) string { return strconv.FormatInt(id, 10) }
