package cli

import (
	"strings"
	"testing"
)

// TestEnqueueRefusesUnstorableInput: fractions where a whole number is wanted,
// NUL bytes, invalid UTF-8 and numbers beyond 32 bits exit 2 with one precise
// message and write nothing, the same on every dialect (issue 10, item 7).
func TestEnqueueRefusesUnstorableInput(t *testing.T) {
	qcDatabases(t, func(t *testing.T, dsn string) {
		before := qcSnapshot(t, dsn)
		for _, c := range []struct {
			says string
			args []string
		}{
			{"line 2: order must be a whole number, got 1.5", []string{"--file", qcFile(t, "frac.yaml", "stages:\n  - order: 1.5\n    tasks: [{body: SELECT 1}]\n")}},
			{"priority must be a whole number, got 2.0", []string{"--file", qcFile(t, "prio.yaml", "stages:\n  - order: 1\n    tasks: [{body: SELECT 1, priority: 2.0}]\n")}},
			{"cannot unmarshal number 1.5", []string{"--file", qcFile(t, "frac.json", `{"stages":[{"order":1.5,"tasks":[{"body":"SELECT 1"}]}]}`)}},
			{"body contains a NUL byte", []string{"--order", "1", "SELECT 1\x00; SELECT 2"}},
			{"body contains a NUL byte", []string{"--file", qcFile(t, "nul.json", `{"stages":[{"order":1,"tasks":[{"body":"SELECT 1\u0000x"}]}]}`)}},
			{"process: name contains a NUL byte", []string{"--process", "p\x00", "--order", "1", "SELECT 1"}},
			{"--process must name a process", []string{"--process", "", "--order", "1", "SELECT 1"}},
			{"body is not valid UTF-8", []string{"--order", "1", "SELECT '\xff\xfe'"}},
			{"kind is not valid UTF-8", []string{"--kind", "k\xc3", "--order", "1", "x"}},
			{"not valid UTF-8", []string{"--file", qcFile(t, "bad.json", "{\"stages\":[{\"order\":1,\"tasks\":[{\"body\":\"SELECT '\xff'\"}]}]}")}},
			{"not valid UTF-8", []string{"--file", qcFile(t, "bad.yaml", "stages:\n  - order: 1\n    tasks: [{body: \"SELECT '\xff'\"}]\n")}},
			{"order 4294967296 is out of range: it must be a whole number from 0 to 2147483647", []string{"--order", "4294967296", "SELECT 1"}},
			{"priority 2147483648 is out of range", []string{"--order", "1", "--priority", "2147483648", "SELECT 1"}},
			{"priority -2147483649 is out of range", []string{"--order", "1", "--priority", "-2147483649", "SELECT 1"}},
			{"max_attempts 9999999999 is out of range", []string{"--order", "1", "--max-attempts", "9999999999", "SELECT 1"}},
			{"order 99999999999 is out of range", []string{"--file", qcFile(t, "big.yaml", "stages:\n  - order: 99999999999\n    tasks: [{body: SELECT 1}]\n")}},
			{"max_parallel 99999999999 is out of range", []string{"--file", qcFile(t, "bigp.yaml", "max_parallel: 99999999999\nstages:\n  - order: 1\n    tasks: [{body: SELECT 1}]\n")}},
			// Taken for "not set", it became 3; --max-attempts 0 is refused.
			{"line 4: max_attempts must be >= 1, got 0", []string{"--file", qcFile(t, "zero.yaml", "stages:\n  - order: 1\n    tasks: [{body: SELECT 1,\n      max_attempts: 0}]\n")}},
			{"stages[0].tasks[0].max_attempts must be >= 1, got 0", []string{"--file", qcFile(t, "zero.json", `{"stages":[{"order":1,"tasks":[{"body":"SELECT 1","max_attempts":0}]}]}`)}},
			{"--max-attempts must be >= 1, got 0", []string{"--order", "1", "--max-attempts", "0", "SELECT 1"}},
			// A second plan after --- was dropped without a word (exit 0, the first one enqueued).
			{"line 5: a second YAML document: give one plan per file", []string{"--file", qcFile(t, "multidoc.yaml",
				"process: p1\nstages:\n  - order: 1\n    tasks: [{body: SELECT 1}]\n---\nprocess: p2\nstages:\n  - order: 1\n    tasks: [{body: SELECT 2}]\n")}},
		} {
			code, out, stderr := qc(t, dsn, append([]string{"enqueue"}, c.args...)...)
			if code != ExitUsage || !strings.Contains(stderr, c.says) || out != "" || strings.Count(stderr, "\n") != 1 {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and one line saying %q", c.args, code, out, stderr, c.says)
			}
		}
		if after := qcSnapshot(t, dsn); after != before {
			t.Errorf("refused input was written:\n%s\n---\n%s", before, after)
		}
	})
}

// TestScheduleFileRefusedLikeAPlanFile: a schedule file (schedule add --from)
// is read as strictly as a plan file, the plan it holds included: a fraction
// where a whole number belongs was truncated (order 1.5 ran as 1), and a JSON
// schedule with more after it, or a YAML file of two, was read as its first.
func TestScheduleFileRefusedLikeAPlanFile(t *testing.T) {
	qcDatabases(t, func(t *testing.T, dsn string) {
		const plan = "plan:\n  stages:\n    - order: 1\n      tasks: [{body: SELECT 1}]\n"
		const jsonSched = `{"name":"s1","every":"1h","plan":{"stages":[{"order":1,"tasks":[{"body":"SELECT 1"}]}]}}`
		before := qcSnapshot(t, dsn)
		for _, c := range []struct{ says, name, content string }{
			{"line 5: order must be a whole number, got 1.5", "frac.yaml", "name: s1\nevery: 1h\nplan:\n  stages:\n    - order: 1.5\n      tasks: [{body: SELECT 1}]\n"},
			{"line 4: max_parallel must be a whole number, got 2.5", "par.yaml", "name: s1\nevery: 1h\nplan:\n  max_parallel: 2.5\n" + plan[6:]},
			{"trailing data after the schedule object: give one schedule per file", "junk.json", jsonSched + ` {"junk":1}`},
			{"line 7: a second YAML document: give one schedule per file", "two.yaml", "name: s1\nevery: 1h\n" + plan + "---\nname: s2\nevery: 1h\n" + plan},
			{"cannot unmarshal number 1.5", "frac.json", `{"name":"s1","every":"1h","plan":{"stages":[{"order":1.5,"tasks":[{"body":"SELECT 1"}]}]}}`},
			{"field retries not found", "unknown.yaml", "name: s1\nevery: 1h\nretries: 3\n" + plan},
			{"unknown field \"retries\"", "unknown.json", `{"name":"s1","every":"1h","retries":3,"plan":{"stages":[{"order":1,"tasks":[{"body":"SELECT 1"}]}]}}`},
			{"line 1: the file is not valid UTF-8", "bad.yaml", "name: s\xff\nevery: 1h\n" + plan},
			{"the file is empty", "empty.yaml", ""},
		} {
			// Each its own name: one accepted must not hide the next.
			content := strings.ReplaceAll(c.content, "s1", strings.TrimSuffix(c.name, ".yaml"))
			code, out, stderr := qc(t, dsn, "schedule", "add", "--from", qcFile(t, c.name, content))
			if code != ExitUsage || !strings.Contains(stderr, "invalid schedule") || !strings.Contains(stderr, c.says) || out != "" {
				t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 saying %q", c.name, code, out, stderr, c.says)
			}
		}
		if after := qcSnapshot(t, dsn); after != before {
			t.Errorf("a refused schedule file was written:\n%s\n---\n%s", before, after)
		}
		qcExpect(t, dsn, 0, "schedule s1 added", "schedule", "add", "--from", qcFile(t, "ok.json", jsonSched))
		qcExpect(t, dsn, 0, "schedule s2 added", "schedule", "add", "--from", qcFile(t, "ok.yaml", "name: s2\nevery: 1h\n"+plan+"---\n"))
	})
}
