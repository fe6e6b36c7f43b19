package stages

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseYAMLPlan(t *testing.T) {
	src := `
process: nightly
defaults:
  max_attempts: 5
  kind: etl
stages:
  - order: 200
    tasks:
      - body: load
        atomic: true
  - order: 100
    tasks:
      - body: a
      - body: b
        max_attempts: 1
        kind: sql
        delay: 90s
`
	p, err := Parse(strings.NewReader(src), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	sp := p.Resolve()
	if sp.Process != "nightly" || len(sp.Tasks) != 3 {
		t.Fatalf("resolved %+v", sp)
	}
	load, a, b := sp.Tasks[0], sp.Tasks[1], sp.Tasks[2]
	if load.Order != 200 || !load.Atomic || load.Kind != "etl" || load.MaxAttempts != 5 {
		t.Errorf("load = %+v", load)
	}
	if a.Order != 100 || a.Atomic || a.MaxAttempts != 5 {
		t.Errorf("a = %+v", a)
	}
	if b.Kind != "sql" || b.MaxAttempts != 1 || b.Delay != 90*time.Second {
		t.Errorf("b = %+v", b)
	}
}

func TestParseJSONPlanDefaults(t *testing.T) {
	p, err := Parse(strings.NewReader(`{"stages":[{"order":0,"tasks":[{"body":"SELECT 1"}]}]}`), "json")
	if err != nil {
		t.Fatal(err)
	}
	sp := p.Resolve()
	if sp.Process != "default" || sp.Tasks[0].Kind != DefaultKind || sp.Tasks[0].MaxAttempts != DefaultMaxAttempts {
		t.Errorf("resolved %+v", sp)
	}
}

func TestParseRejects(t *testing.T) {
	for name, src := range map[string]string{
		"unknown field":    `{"stages":[{"order":1,"tasks":[{"body":"x","retries":3}]}]}`,
		"no stages":        `{"process":"p"}`,
		"order missing":    `{"stages":[{"tasks":[{"body":"x"}]}]}`,
		"negative order":   `{"stages":[{"order":-1,"tasks":[{"body":"x"}]}]}`,
		"fractional":       `{"stages":[{"order":1.5,"tasks":[{"body":"x"}]}]}`,
		"order as text":    `{"stages":[{"order":"ten","tasks":[{"body":"x"}]}]}`,
		"empty stage":      `{"stages":[{"order":1,"tasks":[]}]}`,
		"blank body":       `{"stages":[{"order":1,"tasks":[{"body":"  "}]}]}`,
		"bad delay":        `{"stages":[{"order":1,"tasks":[{"body":"x","delay":"soon"}]}]}`,
		"neg delay":        `{"stages":[{"order":1,"tasks":[{"body":"x","delay":"-1s"}]}]}`,
		"delay and run_at": `{"stages":[{"order":1,"tasks":[{"body":"x","delay":"30s","run_at":"2030-01-01T00:00:00Z"}]}]}`,
		"long process":     `{"process":"` + strings.Repeat("p", 201) + `","stages":[{"order":1,"tasks":[{"body":"x"}]}]}`,
		"trailing data":    `{"stages":[{"order":1,"tasks":[{"body":"x"}]}]} {}`,
	} {
		if _, err := Parse(strings.NewReader(src), "json"); !errors.Is(err, ErrInvalidPlan) {
			t.Errorf("%s: err = %v, want ErrInvalidPlan", name, err)
		}
	}
}

func TestCheckOrder(t *testing.T) {
	at := func(s float64) time.Time { return time.Unix(0, 0).Add(time.Duration(s * float64(time.Second))) }
	end := func(s float64) *time.Time { e := at(s); return &e }
	good := []Run{
		{TaskID: 1, Process: "p", Order: 1, Start: at(0), End: end(1), Final: true},
		{TaskID: 2, Process: "p", Order: 1, Start: at(0), End: end(2), Final: true},
		{TaskID: 3, Process: "p", Order: 2, Start: at(2), End: end(3), Final: true},
		{TaskID: 4, Process: "q", Order: 9, Start: at(0.5), End: end(1), Final: true},
	}
	if v := CheckOrder(good); len(v) != 0 {
		t.Errorf("violations in a good history: %v", v)
	}
	bad := append(good, Run{TaskID: 5, Process: "p", Order: 3, Start: at(2.5), End: end(4), Final: true})
	if v := CheckOrder(bad); len(v) != 1 || v[0].Started.TaskID != 5 || v[0].Blocker.TaskID != 3 {
		t.Errorf("violations = %v, want task 5 blocked by task 3", v)
	}
	// A failed attempt does not finish its task.
	retried := []Run{
		{TaskID: 1, Process: "p", Order: 1, Start: at(0), End: end(1)},
		{TaskID: 2, Process: "p", Order: 2, Start: at(1.5), End: end(2), Final: true},
		{TaskID: 1, Process: "p", Order: 1, Start: at(3), End: end(4), Final: true},
	}
	if v := CheckOrder(retried); len(v) != 1 {
		t.Errorf("a start after a failed lower attempt was not flagged: %v", v)
	}
	if got := MaxOverlap(good, func(r Run) bool { return r.Process == "p" }); got != 2 {
		t.Errorf("MaxOverlap = %d, want 2", got)
	}
}

// TestParseRefusesASecondDocument: a YAML file of two documents (two plans
// separated by ---) was read as its first plan, the second dropped without a
// word; and a JSON object followed by a stray closing brace passed the
// trailing-data check. Both are refused, naming the rule: one plan per file.
// A trailing empty document drops nothing and is let through.
func TestParseRefusesASecondDocument(t *testing.T) {
	const p1 = "process: p1\nstages:\n  - order: 1\n    tasks: [{body: SELECT 1}]\n"
	const p2 = "process: p2\nstages:\n  - order: 1\n    tasks: [{body: SELECT 2}]\n"
	for name, c := range map[string]struct{ src, format string }{
		"two plans":           {p1 + "---\n" + p2, "yaml"},
		"after an empty one":  {p1 + "---\n---\n" + p2, "yaml"},
		"a scalar after":      {p1 + "---\nhello\n", "yaml"},
		"json, stray brace":   {`{"stages":[{"order":1,"tasks":[{"body":"x"}]}]}}`, "json"},
		"json, second object": {`{"stages":[{"order":1,"tasks":[{"body":"x"}]}]} {"process":"p2"}`, "json"},
	} {
		_, err := Parse(strings.NewReader(c.src), c.format)
		if !errors.Is(err, ErrInvalidPlan) || !strings.Contains(err.Error(), "one plan per file") {
			t.Errorf("%s: err = %v, want ErrInvalidPlan saying one plan per file", name, err)
		}
	}
	for name, src := range map[string]string{
		"document start": "---\n" + p1,
		"trailing ---":   p1 + "---\n",
		"document end":   p1 + "...\n",
		"comment after":  p1 + "---\n# nothing more\n",
	} {
		if p, err := Parse(strings.NewReader(src), "yaml"); err != nil || p.Process != "p1" {
			t.Errorf("%s: %+v, %v; want plan p1", name, p, err)
		}
	}
}

// TestParseRefusesAnExplicitZeroMaxAttempts: max_attempts: 0 in a plan file
// was taken for "not set" and became the default (3), while enqueue
// --max-attempts 0 is refused. A 0 written in the file is refused the same
// way, where tasks and defaults take it; leaving the field out still means
// the default.
func TestParseRefusesAnExplicitZeroMaxAttempts(t *testing.T) {
	for name, c := range map[string]struct{ src, format, says string }{
		"task, yaml":       {"stages:\n  - order: 1\n    tasks:\n      - body: x\n        max_attempts: 0\n", "yaml", "line 5: max_attempts must be >= 1, got 0"},
		"defaults, yaml":   {"defaults:\n  max_attempts: 0\nstages:\n  - order: 1\n    tasks: [{body: x}]\n", "yaml", "line 2: max_attempts must be >= 1, got 0"},
		"flow, yaml":       {"stages: [{order: 1, tasks: [{body: x, max_attempts: 0x0}]}]\n", "yaml", "line 1: max_attempts must be >= 1, got 0x0"},
		"task, json":       {`{"stages":[{"order":1,"tasks":[{"body":"x"},{"body":"y","max_attempts":0}]}]}`, "json", "stages[0].tasks[1].max_attempts must be >= 1, got 0"},
		"defaults, json":   {`{"defaults":{"max_attempts":-0},"stages":[{"order":1,"tasks":[{"body":"x"}]}]}`, "json", "defaults.max_attempts must be >= 1, got -0"},
		"other case, json": {`{"stages":[{"order":1,"tasks":[{"body":"x","Max_Attempts":0}]}]}`, "json", "stages[0].tasks[0].Max_Attempts must be >= 1, got 0"},
	} {
		_, err := Parse(strings.NewReader(c.src), c.format)
		if !errors.Is(err, ErrInvalidPlan) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: err = %v, want ErrInvalidPlan saying %q", name, err, c.says)
		}
	}
	p, err := Parse(strings.NewReader(`{"defaults":{"kind":"sql"},"stages":[{"order":1,"tasks":[{"body":"x","max_attempts":1},{"body":"y"}]}]}`), "json")
	if err != nil {
		t.Fatal(err)
	}
	if sp := p.Resolve(); sp.Tasks[0].MaxAttempts != 1 || sp.Tasks[1].MaxAttempts != DefaultMaxAttempts {
		t.Errorf("resolved %+v: want 1, then the default", sp.Tasks)
	}
}

// TestRangeErrorsNameTheFieldsRange: a number beyond 32 bits in a field that
// takes no negative number was refused with the columns' signed range
// ("-2147483648 to 2147483647"), though an order must be >= 0 (enqueue
// --order 4294967296 said so). The message names the field's own range.
func TestRangeErrorsNameTheFieldsRange(t *testing.T) {
	for name, c := range map[string]struct{ src, says string }{
		"order":                 {`{"stages":[{"order":4294967296,"tasks":[{"body":"x"}]}]}`, "stages[0]: order 4294967296 is out of range: it must be a whole number from 0 to 2147483647"},
		"max_attempts":          {`{"stages":[{"order":1,"tasks":[{"body":"x","max_attempts":9999999999}]}]}`, "stages[0].tasks[0]: max_attempts 9999999999 is out of range: it must be a whole number from 1 to 2147483647"},
		"defaults.max_attempts": {`{"defaults":{"max_attempts":9999999999},"stages":[{"order":1,"tasks":[{"body":"x"}]}]}`, "defaults.max_attempts 9999999999 is out of range: it must be a whole number from 1 to 2147483647"},
		"max_parallel":          {`{"max_parallel":99999999999,"stages":[{"order":1,"tasks":[{"body":"x"}]}]}`, "max_parallel 99999999999 is out of range: it must be a whole number from 0 to 2147483647"},
		"weight":                {`{"weight":99999999999,"stages":[{"order":1,"tasks":[{"body":"x"}]}]}`, "weight 99999999999 is out of range: it must be a whole number from 1 to 1000"},
		"priority":              {`{"priority":99999999999,"stages":[{"order":1,"tasks":[{"body":"x"}]}]}`, "priority 99999999999 is out of range: it must fit in 32 bits (-2147483648 to 2147483647)"},
	} {
		_, err := Parse(strings.NewReader(c.src), "json")
		if !errors.Is(err, ErrInvalidPlan) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: err = %v, want ErrInvalidPlan saying %q", name, err, c.says)
		}
	}
}
