package bench

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSpreadDrain drains tasks spread over processes with the bench's own
// drain on each dialect that always runs here, and checks that every task is
// counted once and, on PostgreSQL, that the drain's cost was measured.
func TestSpreadDrain(t *testing.T) {
	forEachLocalTarget(t, func(t *testing.T, tg *target) {
		name := tg.name
		ctx := context.Background()
		cfg := NewConfig()
		cfg.N, cfg.SpreadProcesses, cfg.Concurrency, cfg.Timeout = 210, 7, 8, 2*time.Minute
		r := &runner{cfg: cfg}
		row := &Result{Dialect: name, Scenario: "drain/spread", N: cfg.N}
		a := &acc{}
		if err := r.spreadDrain(ctx, tg, 1, row, a); err != nil {
			t.Fatal(err)
		}
		if row.Extra["done"] != 210 || row.TimedOut {
			t.Errorf("done %v of 210, timed out %v (%s)", row.Extra["done"], row.TimedOut, row.Note)
		}
		if len(a.rates) != 1 || a.rates[0] <= 0 {
			t.Errorf("rates %v", a.rates)
		}
		if name == "postgres" {
			// Backend CPU is read from /proc in clock ticks (10 ms): on a fast
			// machine 210 no-op tasks can cost less than one, so zero is a
			// measurement; a missing figure is not.
			if len(a.xact) != 1 || a.xact[0] <= 0 || len(a.cpu) != 1 || a.cpu[0] < 0 {
				t.Errorf("cost per task: xact %v cpu %v (%v)", a.xact, a.cpu, a.why)
			}
		} else if len(a.xact)+len(a.cpu) != 0 {
			t.Errorf("SQLite has no server statistics, got xact %v cpu %v", a.xact, a.cpu)
		}
	})
}

func TestSpreadSizes(t *testing.T) {
	got := spreadSizes(4, 10)
	if !slices.Equal(got, []int{3, 3, 2, 2}) {
		t.Errorf("spreadSizes(4, 10) = %v", got)
	}
	names := spreadNames("p-", 100, 200_000)
	if len(names) != 100 || names[0] != "p-00" || names[99] != "p-99" || !slices.IsSorted(names) {
		t.Errorf("spreadNames: %d names, %q .. %q", len(names), names[0], names[len(names)-1])
	}
	if n := spreadNames("p-", 100, 3); len(n) != 3 {
		t.Errorf("100 processes for 3 tasks: %d names, want 3", len(n))
	}
}

// TestSummarize checks that rows show the medians of the runs, that every
// drain is compared with River's median, and that each run's figure and its
// ratio to the same run's River are kept beside the medians.
func TestSummarize(t *testing.T) {
	cfg := NewConfig()
	cfg.Runs = 3
	order := []string{"river", "drain/noop", "drain/sql", "enqueue/batch"}
	rows := map[string]*Result{}
	for _, s := range order {
		rows[s] = &Result{Dialect: "postgres", Scenario: s}
	}
	accs := map[string]*acc{
		"river":         {rates: []float64{30000, 10000, 20000}, xact: []float64{0.002, 0.003, 0.001}, cpu: []float64{50, 60, 55}},
		"drain/noop":    {rates: []float64{7000, 5000, 6000}, xact: []float64{0.1, 0.2, 0.3}},
		"drain/sql":     {why: []string{"PostgreSQL CPU: x", "PostgreSQL CPU: x"}},
		"enqueue/batch": {rates: []float64{50000}},
	}
	rows["drain/sql"].Error = "boom"
	out := summarize(cfg, order, rows, accs, true)
	by := map[string]Result{}
	for _, r := range out {
		by[r.Scenario] = r
	}
	if r := by["river"]; r.TasksPerSec != 20000 || r.XactPerTask != 0.002 || r.PGCPUPerTaskUs != 55 {
		t.Errorf("river row %+v", r)
	}
	n := by["drain/noop"]
	if n.TasksPerSec != 6000 || n.RiverTasksPerSec != 20000 || n.VsRiver != 0.3 || n.XactPerTask != 0.2 {
		t.Errorf("drain/noop row %+v", n)
	}
	if !strings.Contains(n.Summary, "median of 3") {
		t.Errorf("drain/noop summary %q", n.Summary)
	}
	if got, want := n.Extra["runs_tasks_per_s"], []float64{7000, 5000, 6000}; !slices.Equal(asFloats(got), want) {
		t.Errorf("drain/noop runs_tasks_per_s %v, want %v", got, want)
	}
	// Run by run: 7000/30000, 5000/10000, 6000/20000.
	if got, want := n.Extra["runs_vs_river"], []float64{0.23, 0.5, 0.3}; !slices.Equal(asFloats(got), want) {
		t.Errorf("drain/noop runs_vs_river %v, want %v", got, want)
	}
	if _, ok := by["enqueue/batch"].Extra["runs_tasks_per_s"]; ok {
		t.Errorf("one run listed as runs: %v", by["enqueue/batch"].Extra)
	}
	if s := by["drain/sql"]; s.VsRiver != 0 || s.Error != "boom" {
		t.Errorf("a failed drain got a ratio: %+v", s)
	}
	if e := by["enqueue/batch"]; e.VsRiver != 0 {
		t.Errorf("enqueue compared with River: %+v", e)
	}
	var b strings.Builder
	if err := writeTable(&b, out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "VS RIVER") || !strings.Contains(b.String(), "0.30x") || !strings.Contains(b.String(), "55 µs") {
		t.Errorf("table:\n%s", b.String())
	}
}

// asFloats is v as a []float64, or nil.
func asFloats(v any) []float64 {
	f, _ := v.([]float64)
	return f
}

// TestRunRatiosNeedEveryRun: after a failed run of either side the lists no
// longer pair run with run, so no ratios are given.
func TestRunRatiosNeedEveryRun(t *testing.T) {
	if got := runRatios([]float64{10, 20}, []float64{5, 10, 20}, 3); got != nil {
		t.Errorf("our run 3 missing: %v", got)
	}
	if got := runRatios([]float64{10, 20, 30}, []float64{5, 10}, 3); got != nil {
		t.Errorf("River's run 3 missing: %v", got)
	}
	if got := runRatios([]float64{10, 20, 30}, []float64{5, 10, 20}, 3); !slices.Equal(got, []float64{2, 2, 1.5}) {
		t.Errorf("every run: %v", got)
	}
}

func TestValidateScenarios(t *testing.T) {
	cfg := NewConfig()
	cfg.Scenarios = []string{"river", "drain"}
	if err := cfg.Validate(); err != nil {
		t.Errorf("river,drain: %v", err)
	}
	cfg.Scenarios = []string{"rivers"}
	if err := cfg.Validate(); err == nil {
		t.Error("an unknown scenario was accepted")
	}
	cfg.Scenarios, cfg.SpreadProcesses = nil, 0
	if err := cfg.Validate(); err == nil {
		t.Error("zero spread processes accepted")
	}
}
