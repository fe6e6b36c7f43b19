package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
)

// TestReadableOutput: multi-line names and bodies keep a table row on one line,
// times carry their date, logs are capped by default, and every --json output
// follows one style (issue 10, item 17).
func TestReadableOutput(t *testing.T) {
	qcDatabases(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		started := time.Now() // a run across midnight writes rows on either day
		// The JSON of an empty queue: lists are [], never null.
		for _, args := range [][]string{{"tasks", "--json"}, {"logs", "--json"}, {"limit", "list", "--json"},
			{"schedule", "list", "--json"}, {"lease", "list", "--json"}} {
			if out := strings.TrimSpace(qcExpect(t, dsn, 0, "", args...)); out != "[]" {
				t.Errorf("%v on an empty queue: %q, want []", args, out)
			}
		}

		var plan strings.Builder
		plan.WriteString("process: \"two\\nlines\"\nstages:\n  - order: 1\n    tasks:\n")
		for i := range 205 {
			fmt.Fprintf(&plan, "      - body: \"SELECT %d;\\nSELECT 'tab\\there';\"\n", i)
		}
		planFile := qcFile(t, "plan.yaml", plan.String())
		qcExpect(t, dsn, 0, "", "enqueue", "--file", planFile)
		d := qcDialect(t, dsn)
		for done := 0; done < 205; {
			got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w\n1", Max: 50, Token: 9, Lease: time.Minute})
			if err != nil || len(got) == 0 {
				t.Fatalf("claim: %d, %v", len(got), err)
			}
			for _, task := range got {
				if err := d.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: task.ID, Token: 9, Outcome: dialect.OutcomeSucceeded}); err != nil {
					t.Fatal(err)
				}
			}
			done += len(got)
		}
		qcExpect(t, dsn, 0, "", "enqueue", "--process", "two\nlines", "--order", "2", "SELECT 1;\nSELECT 2")
		qcExpect(t, dsn, 0, "", "schedule", "add", "nightly", "--every", "1h", "SELECT 1")

		dated := func(line string) bool {
			return strings.Contains(line, started.Format("2006-01-02")) || strings.Contains(line, time.Now().Format("2006-01-02"))
		}
		code, out, stderr := qc(t, dsn, "logs")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if code != 0 || len(lines) != 1+defaultLogRows || !strings.Contains(stderr, "--limit 0") {
			t.Errorf("logs: exit %d, %d lines (want header + %d), stderr %q", code, len(lines), defaultLogRows, stderr)
		}
		for _, l := range lines[1:] {
			if !strings.Contains(l, `two\nlines`) || !strings.Contains(l, `;\nSELECT 'tab\there'`) || !dated(l) {
				t.Errorf("logs row not on one line with its date: %q", l)
				break
			}
		}
		if n := strings.Count(qcExpect(t, dsn, 0, "", "logs", "--limit", "0"), "\n"); n != 1+205 {
			t.Errorf("logs --limit 0: %d lines, want %d", n, 1+205)
		}
		// --newest: the recent end of the trail, still oldest first.
		var every, newest []dialect.LogEntry
		if err := json.Unmarshal([]byte(qcExpect(t, dsn, 0, "", "logs", "--limit", "0", "--json")), &every); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(qcExpect(t, dsn, 0, "", "logs", "--newest", "--limit", "3", "--json")), &newest); err != nil {
			t.Fatal(err)
		}
		if len(newest) != 3 || len(every) < 3 || newest[0].ID != every[len(every)-3].ID || newest[2].ID != every[len(every)-1].ID {
			t.Errorf("logs --newest --limit 3: %+v; want the last 3 of %d rows, oldest first", newest, len(every))
		}
		if _, _, stderr := qc(t, dsn, "logs", "--newest"); !strings.Contains(stderr, "showing the newest 200 rows") {
			t.Errorf("logs --newest past the default limit: stderr %q", stderr)
		}
		for _, args := range [][]string{{"tasks"}, {"status"}} {
			out := qcExpect(t, dsn, 0, "", args...)
			if !strings.Contains(out, `two\nlines`) || strings.Contains(out, "two\nlines") {
				t.Errorf("%v: the multi-line name is not escaped:\n%s", args, out)
			}
		}
		if out := qcExpect(t, dsn, 0, "", "tasks"); !strings.Contains(out, `SELECT 1;\nSELECT 2`) || !dated(out) {
			t.Errorf("tasks: body not escaped or time without its date:\n%s", out)
		}

		// One JSON style.
		for _, args := range [][]string{{"tasks", "--json"}, {"logs", "--json", "--limit", "3"}, {"status", "--json", "--all"},
			{"limit", "list", "--json"}, {"schedule", "list", "--json"}, {"schedule", "runs", "nightly", "--json"},
			{"enqueue", "--json", "--order", "3", "SELECT 3"}, {"limit", "set", "k1", "2", "--json"}, {"limit", "delete", "k1", "--json"}} {
			out := qcExpect(t, dsn, 0, "", args...)
			var v any
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("%v: not JSON: %v\n%s", args, err, out)
			}
			checkJSONStyle(t, fmt.Sprint(args), v)
		}

		// why and status --watch escape what the enqueuer wrote (a process
		// name with a line break and an escape sequence) as tables do: it can
		// neither drive the terminal nor forge a line of their output.
		qcExpect(t, dsn, 0, "", "enqueue", "--process", "ev\x1b[2Jil\n- Nothing holds it back", "--order", "1", "--delay", "1h", "SELECT 1")
		tasks, err := d.TaskList(ctx, dialect.TaskFilter{Process: "ev\x1b[2Jil\n- Nothing holds it back"})
		if err != nil || len(tasks) != 1 {
			t.Fatalf("the evil process's task: %+v, %v", tasks, err)
		}
		evilOutput := func(args ...string) {
			t.Helper()
			_, out, stderr := qc(t, dsn, args...)
			if strings.Contains(out+stderr, "\x1b") || strings.Contains(out+stderr, "\n- Nothing") || !strings.Contains(out, `ev\x1b[2Jil\n- Nothing`) {
				t.Errorf("%s: output %q, stderr %q; want the name escaped", args[0], out, stderr)
			}
		}
		evilOutput("why", strconv.FormatInt(tasks[0].ID, 10))
		qcExpect(t, dsn, 0, "", "schedule", "add", "evil", "--every", "1h", "--process", "ev\x1b[2Jil\n- Nothing, 3", "SELECT 1")
		evilOutput("schedule", "run-now", "evil")

		// --wait --json is NDJSON: one object per line, nothing else.
		qcWorker(t, dsn, queue.WorkerConfig{PollMax: 50 * time.Millisecond, NoScheduler: true})
		evilOutput("enqueue", "--process", "ev\x1b[2Jil\n- Nothing, 2", "--wait", "SELECT 1") // status --watch's lines
		out = qcExpect(t, dsn, 0, "", "enqueue", "--process", "nd", "--wait", "--json", "SELECT 1")
		sc := bufio.NewScanner(strings.NewReader(out))
		n := 0
		for sc.Scan() {
			var obj map[string]any
			if err := json.Unmarshal(sc.Bytes(), &obj); err != nil {
				t.Fatalf("--wait --json line %d is not one JSON object: %q (%v)", n+1, sc.Text(), err)
			}
			checkJSONStyle(t, "--wait --json", obj)
			n++
		}
		if n < 2 {
			t.Errorf("--wait --json: %d lines, want the result and at least one progress line:\n%s", n, out)
		}
	})
}

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// listKeys are keys whose value is a list in stageq's JSON.
var listKeys = map[string]bool{"stages": true, "task_ids": true, "processes": true, "workers": true,
	"limits": true, "schedules": true, "leases": true}

func checkJSONStyle(t *testing.T, what string, v any) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if !snakeCase.MatchString(k) {
				t.Errorf("%s: key %q is not snake_case", what, k)
			}
			if val == nil && listKeys[k] {
				t.Errorf("%s: %q is null, want []", what, k)
			}
			if s, ok := val.(string); ok && strings.HasPrefix(s, "0001-01-01") {
				t.Errorf("%s: %q is a zero timestamp", what, k)
			}
			if _, isObject := val.(map[string]any); k == "plan" && !isObject {
				t.Errorf("%s: %q is %T, want the plan's JSON object", what, k, val)
			}
			if k == "interval" || k == "grace" || k == "lease" {
				t.Errorf("%s: duration %q has no unit in its name (want *_seconds)", what, k)
			}
			checkJSONStyle(t, what, val)
		}
	case []any:
		for _, e := range x {
			checkJSONStyle(t, what, e)
		}
	}
}

// TestConsoleLogsArePlainWhenRedirected: --log-format console writes no
// colour codes where stderr is not a terminal (a file, a pipe).
func TestConsoleLogsArePlainWhenRedirected(t *testing.T) {
	var b strings.Builder
	l := logFlags{level: "info", format: "console"}
	lg, err := l.logger(&b)
	if err != nil {
		t.Fatal(err)
	}
	lg.Info().Dur("took", 1500*time.Millisecond).Msg("task ended")
	if strings.Contains(b.String(), "\x1b[") || !strings.Contains(b.String(), "took=1500") {
		t.Errorf("console log to a buffer: %q; want plain text with took=1500", b.String())
	}
}

// TestAttemptsNameTheAbandoned: a task whose attempt number passed its
// max_attempts through abandoned attempts says so, where "2/1" alone reads
// as past its limit.
func TestAttemptsNameTheAbandoned(t *testing.T) {
	for want, task := range map[string]dialect.TaskInfo{
		"1/3":                            {Attempt: 1, MaxAttempts: 3},
		"2/1 (1 abandoned, not counted)": {Attempt: 2, MaxAttempts: 1, Abandons: 1},
	} {
		if got := attempts(task); got != want {
			t.Errorf("attempts(%+v) = %q, want %q", task, got, want)
		}
	}
}
