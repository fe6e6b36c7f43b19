package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/internal/queuetest"
	"github.com/stageq/stageq/queue"
)

// qcDatabases yields a fresh, migrated SQLite file and PostgreSQL database,
// both at once.
func qcDatabases(t *testing.T, fn func(t *testing.T, dsn string)) {
	queuetest.EachDatabase(t, "stageq_cli", true, fn)
}

// qcDialect opens the queue database at dsn directly, to set up what the
// commands under test then see; it closes when the test ends.
func qcDialect(t *testing.T, dsn string) dialect.Dialect {
	t.Helper()
	d, err := dialect.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// qcWorker runs a worker on the queue at dsn until the test ends.
func qcWorker(t *testing.T, dsn string, cfg queue.WorkerConfig) {
	t.Helper()
	w, err := queue.NewWorker(queuetest.Client(t, dsn), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// qc runs queuectl (or enqueue) in-process and returns exit code and output.
func qc(t *testing.T, dsn string, args ...string) (int, string, string) {
	t.Helper()
	cmd := NewQueuectlCommand()
	if args[0] == "enqueue" {
		cmd, args = NewEnqueueCommand(), args[1:]
	}
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := Execute(ctx, cmd, append([]string{"--dsn", dsn}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func qcExpect(t *testing.T, dsn string, want int, errHas string, args ...string) string {
	t.Helper()
	code, out, errOut := qc(t, dsn, args...)
	if code != want {
		t.Fatalf("%v: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, want, out, errOut)
	}
	// Successes say what they did on stdout; failures on stderr.
	if said := map[bool]string{true: out, false: errOut}[want == 0]; errHas != "" && !strings.Contains(said, errHas) {
		t.Fatalf("%v: output %q does not say %q", args, said, errHas)
	}
	return out
}

// qcFile writes a file for a command under test to read (a plan, say) in a
// directory of its own, and returns its path.
func qcFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// qcSnapshot is the queue's state, to prove that refused commands change nothing.
func qcSnapshot(t *testing.T, dsn string) string {
	t.Helper()
	return qcExpect(t, dsn, 0, "", "tasks", "--json") + qcExpect(t, dsn, 0, "", "limit", "list", "--json") +
		qcExpect(t, dsn, 0, "", "status", "--all", "--json")
}

func TestQueuectlCommands(t *testing.T) {
	qcDatabases(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		qcExpect(t, dsn, 0, "", "enqueue", "--process", "etl", "--order", "100", "--limit", "erp-api", "SELECT 1")
		qcExpect(t, dsn, 0, "", "enqueue", "--process", "etl", "--order", "100", "SELECT 2")
		qcExpect(t, dsn, 0, "", "enqueue", "--process", "etl", "--order", "200", "SELECT 3")

		// Lease one task so there is a running one, and fail another for good.
		d := qcDialect(t, dsn)
		got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w1", Max: 2, Token: 7, Lease: time.Minute})
		if err != nil || len(got) != 2 {
			t.Fatalf("claim: %v, %v", got, err)
		}
		running, failed := got[0].ID, got[1].ID
		if err := d.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: failed, Token: 7, Outcome: dialect.OutcomeFailed, Error: "boom"}); err != nil {
			t.Fatal(err)
		}

		// The task list by kind.
		qcExpect(t, dsn, 0, "", "enqueue", "--process", "mail", "--order", "1", "--kind", "email", "to: ops")
		if out := qcExpect(t, dsn, 0, "", "tasks", "--kind", "email"); !strings.Contains(out, "to: ops") || strings.Contains(out, "SELECT") {
			t.Errorf("tasks --kind email:\n%s\nwant the email task alone", out)
		}
		if out := qcExpect(t, dsn, 0, "", "tasks", "--kind", "sql"); strings.Contains(out, "to: ops") || !strings.Contains(out, "SELECT 3") {
			t.Errorf("tasks --kind sql:\n%s\nwant the SQL tasks alone", out)
		}
		qcExpect(t, dsn, 0, "", "cancel", "--process", "mail") // out of the claims below

		// Bad input: a clear message, its exit code, nothing changed.
		before := qcSnapshot(t, dsn)
		qcExpect(t, dsn, ExitWrongState, "only a failed task can be retried", "retry", fmt.Sprint(running))
		qcExpect(t, dsn, ExitWrongState, "cannot be cancelled", "cancel", fmt.Sprint(running))
		qcExpect(t, dsn, ExitWrongState, "only a failed task can be discarded", "discard", fmt.Sprint(running))
		qcExpect(t, dsn, ExitNotFound, "not found", "retry", "999999")
		qcExpect(t, dsn, ExitNotFound, "not found", "cancel", "--process", "nope")
		qcExpect(t, dsn, ExitNotFound, "not found", "pause", "nope")
		qcExpect(t, dsn, ExitNotFound, "not found", "status", "nope")
		qcExpect(t, dsn, ExitNotFound, "not found", "limit", "get", "nope")
		qcExpect(t, dsn, ExitNotFound, "not found", "limit", "delete", "nope")
		qcExpect(t, dsn, ExitNotFound, "not found", "limit", "set", "process:nope", "2")
		qcExpect(t, dsn, ExitUsage, "must be >= 0", "limit", "set", "erp-api", "--", "-1")
		qcExpect(t, dsn, ExitUsage, "MAX must be a whole number >= 0", "limit", "set", "erp-api", "-1")
		qcExpect(t, dsn, ExitUsage, "whole number", "limit", "set", "erp-api", "three")
		qcExpect(t, dsn, ExitUsage, "positive whole number", "retry", "abc")
		qcExpect(t, dsn, ExitUsage, "must not be negative", "logs", "--limit", "-5")
		qcExpect(t, dsn, ExitUsage, "give HOST:PORT", "serve", "--addr", "127.0.0.1")
		for _, o := range []string{"dash.example.com", "https://dash.example.com/app", "ftp://dash.example.com", "https://"} {
			qcExpect(t, dsn, ExitUsage, "scheme and host only", "serve", "--origin", o)
		}
		qcExpect(t, dsn, ExitUsage, "must not be negative", "schedule", "runs", "x", "--limit", "-5")
		qcExpect(t, dsn, ExitUsage, "must not be negative", "logs", "--task", "-3")
		qcExpect(t, dsn, ExitUsage, "must not be negative", "tasks", "--limit", "-5")
		qcExpect(t, dsn, ExitUsage, "either a task id or --process", "retry", "1", "--process", "etl")
		qcExpect(t, dsn, ExitUsage, "reserved", "enqueue", "--limit", "kind:x", "SELECT 1")
		qcExpect(t, dsn, ExitUsage, "", "limit", "set", "erp-api")
		if after := qcSnapshot(t, dsn); after != before {
			t.Fatalf("a refused command changed the queue:\nbefore %s\nafter %s", before, after)
		}

		// Limits.
		qcExpect(t, dsn, 0, "", "limit", "set", "erp-api", "3")
		qcExpect(t, dsn, 0, "", "limit", "set", "process:etl", "2")
		out := qcExpect(t, dsn, 0, "", "limit", "get", "erp-api", "--json")
		var l dialect.LimitInfo
		if err := json.Unmarshal([]byte(out), &l); err != nil || l.Max != 3 {
			t.Fatalf("limit get: %s (%v)", out, err)
		}
		out = qcExpect(t, dsn, 0, "", "limit", "list")
		if !strings.Contains(out, "erp-api") || !strings.Contains(out, "process:etl") {
			t.Fatalf("limit list: %s", out)
		}
		qcExpect(t, dsn, 0, "", "limit", "delete", "process:etl")

		// Status shows the per-stage counts.
		out = qcExpect(t, dsn, 0, "", "status", "etl", "--json")
		var rep statusReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Processes) != 1 {
			t.Fatalf("status: %s (%v)", out, err)
		}
		st := rep.Processes[0]
		if st.State != dialect.ProcessFailed || len(st.Stages) != 2 || st.Stages[0].Running != 1 || st.Stages[0].Failed != 1 || st.Stages[1].Pending != 1 {
			t.Fatalf("status of etl: %+v", st)
		}
		if len(rep.Workers) != 0 || len(rep.Limits) != 1 {
			t.Fatalf("status workers %v limits %v", rep.Workers, rep.Limits)
		}
		qcExpect(t, dsn, 0, "", "status")

		// Retry, pause, resume, discard, cancel.
		qcExpect(t, dsn, 0, "will run again", "retry", fmt.Sprint(failed))
		qcExpect(t, dsn, ExitWrongState, "no failed tasks", "retry", "--process", "etl")
		qcExpect(t, dsn, 0, "paused", "pause", "etl")
		if got, _ := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w2", Max: 5, Token: 8, Lease: time.Minute}); len(got) != 0 {
			t.Fatalf("claimed %d tasks of a paused process", len(got))
		}
		qcExpect(t, dsn, 0, "resumed", "resume", "etl")
		got, err = d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w2", Max: 5, Token: 8, Lease: time.Minute})
		if err != nil || len(got) != 1 || got[0].ID != failed {
			t.Fatalf("after resume claimed %v, %v; want task %d", got, err, failed)
		}
		if err := d.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: failed, Token: 8, Outcome: dialect.OutcomeFailed, Error: "again"}); err != nil {
			t.Fatal(err)
		}
		qcExpect(t, dsn, 0, "discarded", "discard", "--process", "etl")
		out = qcExpect(t, dsn, 0, "cancelled", "cancel", "--process", "etl")
		if !strings.Contains(out, "1 still running") {
			t.Fatalf("cancel --process: %s", out)
		}
		qcExpect(t, dsn, ExitWrongState, "no waiting or failed tasks", "cancel", "--process", "etl")

		// The logs filters.
		out = qcExpect(t, dsn, 0, "", "logs", "--process", "etl", "--outcome", "failed", "--json")
		var entries []dialect.LogEntry
		if err := json.Unmarshal([]byte(out), &entries); err != nil || len(entries) != 2 {
			t.Fatalf("logs: %s (%v)", out, err)
		}
	})
}

// TestEnqueueWait: --wait follows the process to its end; plain lines when the
// output is not a terminal; exit 0 on success and 5 when a task fails for good.
func TestEnqueueWait(t *testing.T) {
	qcDatabases(t, func(t *testing.T, dsn string) {
		qcWorker(t, dsn, queue.WorkerConfig{PollMin: 10 * time.Millisecond, PollMax: 50 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond})
		out := qcExpect(t, dsn, 0, "", "enqueue", "--process", "ok", "--wait", "SELECT 1")
		if !strings.Contains(out, `process "ok" succeeded`) || !strings.Contains(out, "stage 0: 1/1 done") {
			t.Fatalf("enqueue --wait: %s", out)
		}
		qcExpect(t, dsn, ExitProcessFailed, "failed", "enqueue", "--process", "bad", "--max-attempts", "1", "--wait", "SELECT * FROM no_such_table")
		qcExpect(t, dsn, 0, "", "status", "ok", "--watch")
		// Discarded, it ends cancelled; the message points at the rows that say so.
		qcExpect(t, dsn, 0, "", "discard", "--process", "bad")
		code, out, errOut := qc(t, dsn, "status", "bad", "--watch")
		if code != ExitProcessFailed || !strings.Contains(errOut, "see `queuectl logs --process bad --newest`") ||
			!strings.HasSuffix(strings.TrimSpace(out), "process bad cancelled") {
			t.Errorf("status --watch of a discarded process: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
	})
}

// TestEnqueueWaitSaysWhyItWaits: a process that stands still with nothing
// running, here a task of a kind no live worker runs, makes --wait say why,
// once, instead of waiting without a word.
func TestEnqueueWaitSaysWhyItWaits(t *testing.T) {
	was := stuckAfter
	t.Cleanup(func() { stuckAfter = was }) // after the parallel subtests
	stuckAfter = 100 * time.Millisecond
	qcDatabases(t, func(t *testing.T, dsn string) {
		qcWorker(t, dsn, queue.WorkerConfig{PollMin: 10 * time.Millisecond, PollMax: 50 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		var out, errb bytes.Buffer
		code := Execute(ctx, NewEnqueueCommand(), []string{"--dsn", dsn, "--process", "stuck", "--kind", "report", "--wait", "x"}, &out, &errb)
		want := `No live worker runs kind "report"`
		if code != ExitInterrupted || strings.Count(out.String(), want) != 1 || !strings.Contains(out.String(), "task 1 waits: ") {
			t.Errorf("enqueue --wait of a task no worker runs: exit %d; want %d (stopped by its deadline) and one line saying %q\nstdout: %s\nstderr: %s",
				code, ExitInterrupted, want, out.String(), errb.String())
		}
	})
}
