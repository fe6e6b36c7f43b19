package dashboard_test

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dashboard"
	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/internal/cli"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// TestWhyHolders: a task behind its process's max_parallel, a full named limit
// and a full kind limit, all held by one running task, and every live slot
// busy — read from the database by each dialect's Inspector and explained the
// same way by the dashboard and `queuectl why`.
func TestWhyHolders(t *testing.T) {
	eachDialect(t, func(t *testing.T, dsn string, c *queue.Client) {
		ctx := context.Background()
		d := c.Dialect()
		op, _ := dialect.AsOperator(d)
		in, err := dialect.AsInspector(d)
		if err != nil {
			t.Fatal(err)
		}
		one, maxPar := 1, 1
		res, err := c.Submit(ctx, stages.Plan{Process: "mailer", MaxParallel: &maxPar, Stages: []stages.Stage{{Order: &one, Limit: "smtp",
			Tasks: []stages.Task{{Kind: "email", Body: "a"}, {Kind: "email", Body: "b"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range []string{"smtp", "kind:email"} {
			if err := op.LimitSet(ctx, l, 1); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.WorkerRegister(ctx, dialect.WorkerInfo{ID: "w-holder", Hostname: "h", PID: 2, Concurrency: 1}); err != nil {
			t.Fatal(err)
		}
		got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w-holder", Max: 2, Token: 11, Lease: time.Minute})
		if err != nil || len(got) != 1 {
			t.Fatalf("claim: %v %v (want exactly one: max_parallel 1)", got, err)
		}
		holder, waiting := got[0].ID, res.TaskIDs[0]
		if waiting == holder {
			waiting = res.TaskIDs[1]
		}
		w, err := in.TaskWait(ctx, waiting, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if w.ProcessRunningCount != 1 || len(w.ProcessRunning) != 1 || w.ProcessRunning[0].ID != holder || w.ProcessRunning[0].WorkerID != "w-holder" {
			t.Errorf("process running: %d %+v", w.ProcessRunningCount, w.ProcessRunning)
		}
		if len(w.Limits) != 2 {
			t.Fatalf("limits: %+v, want kind:email and smtp", w.Limits)
		}
		for _, l := range w.Limits {
			if l.Max != 1 || l.Running != 1 || len(l.Holders) != 1 || l.Holders[0].ID != holder {
				t.Errorf("limit %s: %+v", l.Key, l)
			}
		}
		if w.LiveWorkers != 1 || w.LiveSlots != 1 || w.Running != 1 || len(w.KindWorkers) != 1 || w.KindWorkers[0] != "w-holder" {
			t.Errorf("workers: live %d slots %d running %d kind workers %v", w.LiveWorkers, w.LiveSlots, w.Running, w.KindWorkers)
		}
		codes := map[string]bool{}
		for _, r := range dashboard.Explain(w) {
			codes[r.Code] = true
		}
		for _, want := range []string{"max-parallel", "limit", "capacity"} {
			if !codes[want] {
				t.Errorf("reasons %v lack %q", codes, want)
			}
		}
		if codes["lower-stage"] || codes["no-worker"] || codes["kind-worker"] || codes["paused"] {
			t.Errorf("reasons %v include one that does not apply", codes)
		}

		var out bytes.Buffer
		code := cli.Execute(ctx, cli.NewQueuectlCommand(), []string{"--dsn", dsn, "why", strconv.FormatInt(waiting, 10)}, &out, &out)
		if code != 0 {
			t.Fatalf("queuectl why: exit %d: %s", code, out.String())
		}
		for _, want := range []string{"max_parallel is 1", "Limit smtp is full: 1 of 1", "Limit kind:email is full", "Every live worker slot is busy",
			"task " + strconv.FormatInt(holder, 10) + " (process mailer, order 1): running on w-holder"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("queuectl why lacks %q:\n%s", want, out.String())
			}
		}
		out.Reset()
		if code := cli.Execute(ctx, cli.NewQueuectlCommand(), []string{"--dsn", dsn, "why", "999999"}, &out, &out); code != 3 {
			t.Errorf("queuectl why of an unknown task: exit %d, want 3: %s", code, out.String())
		}
	})
}

// TestWhyLeavesBusySlotsOutBesideAHardBlock: a task held back by a lower
// stage or a pause is not also said to wait for a busy slot; one that only
// waits for a slot is.
func TestWhyLeavesBusySlotsOutBesideAHardBlock(t *testing.T) {
	busy := dialect.TaskWait{LiveWorkers: 1, LiveSlots: 2, Running: 2}
	busy.Task = dialect.TaskInfo{ID: 9, Process: "p", Order: 2, Kind: "sql", State: dialect.StateAvailable}
	lower, paused := busy, busy
	lower.Task.State = dialect.StateBlocked
	lower.Lower, lower.LowerCount = []dialect.TaskRef{{ID: 4, Process: "p", Order: 1, State: dialect.StateFailed}}, 1
	paused.Paused = true
	for name, c := range map[string]struct {
		w    dialect.TaskWait
		want []string
	}{
		"only slots":  {busy, []string{"capacity"}},
		"lower stage": {lower, []string{"lower-stage"}},
		"paused":      {paused, []string{"paused"}},
	} {
		var got []string
		for _, r := range dashboard.Explain(c.w) {
			got = append(got, r.Code)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: reasons %v, want %v", name, got, c.want)
		}
	}
}

// TestWhyNamesAbandonedAttempts: a task whose attempt number passed its
// max_attempts through attempts lost to infrastructure says so, where
// "attempt 2 of 1" alone reads as past its limit.
func TestWhyNamesAbandonedAttempts(t *testing.T) {
	for want, task := range map[string]dialect.TaskInfo{
		"It is running on worker w, attempt 1 of 3: it is not waiting.":                            {State: dialect.StateRunning, WorkerID: "w", Attempt: 1, MaxAttempts: 3},
		"It is running on worker w, attempt 2 of 1 (1 abandoned, not counted): it is not waiting.": {State: dialect.StateRunning, WorkerID: "w", Attempt: 2, MaxAttempts: 1, Abandons: 1},
		"It failed for good after attempt 3 of 2 (1 abandoned, not counted): boom.":                {State: dialect.StateFailed, Attempt: 3, MaxAttempts: 2, Abandons: 1, LastError: "boom", ID: 7, Process: "p"},
	} {
		r := dashboard.Explain(dialect.TaskWait{Task: task})
		if len(r) != 1 || !strings.HasPrefix(r[0].Text, want) {
			t.Errorf("Explain(%+v) = %+v; want one reason starting %q", task, r, want)
		}
	}
}

// TestWhyCommandsPasteIntoAShell: the command a reason suggests names its
// process (or limit) as one shell argument, whatever the name: a shell given
// the text between the backticks runs queuectl with exactly that name. Before,
// the name was pasted in bare: "sp ace" became two arguments, and a name such
// as "x; echo owned" or "<script>…" ran or redirected something else in
// the operator's shell.
func TestWhyCommandsPasteIntoAShell(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH")
	}
	for _, name := range []string{"nightly", "sp ace", "x; echo owned", "<script>alert(1)</script>", "it's $(id)", "-v", "a/b", "100%"} {
		w := dialect.TaskWait{LiveWorkers: 1, LiveSlots: 4, Paused: true}
		w.Task = dialect.TaskInfo{ID: 9, Process: name, Order: 2, Kind: "sql", State: dialect.StateAvailable}
		var cmd string
		for _, r := range dashboard.Explain(w) {
			if r.Code == "paused" {
				_, after, _ := strings.Cut(r.Text, "`")
				cmd, _, _ = strings.Cut(after, "`")
			}
		}
		args, ok := strings.CutPrefix(cmd, "queuectl ")
		if !ok {
			t.Fatalf("%q: no queuectl command in the paused reason (%q)", name, cmd)
		}
		// The shell's own reading of the arguments, printed one a line.
		out, err := exec.Command(sh, "-c", `set -- `+args+`; for a in "$@"; do printf '[%s]' "$a"; done`).Output()
		if err != nil {
			t.Errorf("%q: the shell cannot read %q: %v", name, cmd, err)
			continue
		}
		want := "[resume][" + name + "]"
		if strings.HasPrefix(name, "-") {
			want = "[resume][--][" + name + "]"
		}
		if string(out) != want {
			t.Errorf("%q: a shell reads `%s` as %s, want %s", name, cmd, out, want)
		}
	}
}
