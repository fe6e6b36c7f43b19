package conformance

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/stages"
)

// fairStarts reads the first attempts from Logs in claim order (Logs ids are
// assigned as claims write them).
func fairStarts(t *testing.T, db *testDB) []dialect.LogEntry {
	t.Helper()
	entries := db.logs(t, dialect.LogFilter{})
	sort.Slice(entries, func(i, j int) bool { return entries[i].ID < entries[j].ID })
	var out []dialect.LogEntry
	for _, e := range entries {
		if e.Attempt == 1 {
			out = append(out, e)
		}
	}
	return out
}

// fairSubmit submits n sleeping tasks of one stage to a process with settings.
func fairSubmit(t *testing.T, db *testDB, process string, n int, secs float64, set func(*stages.Plan)) {
	t.Helper()
	p := plan(process, "", []int{100}, sameBody(db.sleepSQL(secs)), n)
	if set != nil {
		set(&p)
	}
	db.submit(t, p)
}

// fairCheckShares checks that at every point of the start sequence, while every
// process still had tasks to start, no process had more than twice its fair
// share of the starts so far (+1 for rounding at the very start).
func fairCheckShares(t *testing.T, starts []dialect.LogEntry, weights map[string]int, sizes map[string]int) {
	t.Helper()
	total := 0
	for _, w := range weights {
		total += w
	}
	got := map[string]int{}
	for k, e := range starts {
		got[e.Process]++
		if got[e.Process] == sizes[e.Process] {
			return // from here on the shares change: this process has no more to start
		}
		n := k + 1
		for p, w := range weights {
			fair := float64(n) * float64(w) / float64(total)
			if float64(got[p]) > 2*fair+1 {
				t.Fatalf("after %d starts process %s had %d, more than twice its fair share %.1f (starts so far: %v)", n, p, got[p], fair, got)
			}
		}
	}
}

// TestFairSeed001 is seed 001's open problem: five processes of 100 tasks and
// ten workers. Every process starts within the first ten claims and none ever
// takes more than twice its fair share.
func TestFairSeed001(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		weights, sizes := map[string]int{}, map[string]int{}
		for i := range 5 {
			name := fmt.Sprintf("p%d", i+1)
			fairSubmit(t, db, name, 100, 0.01, nil)
			weights[name], sizes[name] = 1, 100
		}
		startWorkers(t, db, 10, fastConfig(), nil)
		waitFor(t, 3*time.Minute, "500 tasks", func() bool {
			return len(db.logs(t, dialect.LogFilter{Outcome: dialect.OutcomeSucceeded})) >= 500
		})
		starts := fairStarts(t, db)
		first := map[string]int{}
		for k, e := range starts {
			if _, ok := first[e.Process]; !ok {
				first[e.Process] = k + 1
			}
		}
		for p := range weights {
			if first[p] == 0 || first[p] > 10 {
				t.Errorf("process %s first started at claim %d, want within the first 10", p, first[p])
			}
		}
		fairCheckShares(t, starts, weights, sizes)
		if v := stages.CheckOrder(runs(db.logs(t, dialect.LogFilter{}))); len(v) > 0 {
			t.Errorf("stage order violated: %v", v[0])
		}
		t.Logf("first starts by claim: %v", first)
	})
}

// TestFairWeight: weight 3 gets three claims to weight 1's one.
func TestFairWeight(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		three := 3
		fairSubmit(t, db, "heavy", 90, 0.01, func(p *stages.Plan) { p.Weight = &three })
		fairSubmit(t, db, "light", 90, 0.01, nil)
		startWorkers(t, db, 4, fastConfig(), nil)
		waitFor(t, 3*time.Minute, "180 tasks", func() bool {
			return len(db.logs(t, dialect.LogFilter{Outcome: dialect.OutcomeSucceeded})) >= 180
		})
		starts := fairStarts(t, db)
		fairCheckShares(t, starts, map[string]int{"heavy": 3, "light": 1}, map[string]int{"heavy": 90, "light": 90})
		n := map[string]int{}
		for _, e := range starts[:80] {
			n[e.Process]++
		}
		ratio := float64(n["heavy"]) / float64(max(n["light"], 1))
		if ratio < 2 || ratio > 4 {
			t.Errorf("first 80 starts: heavy %d, light %d (ratio %.2f), want about 3", n["heavy"], n["light"], ratio)
		}
		t.Logf("first 80 starts: %v", n)
	})
}

// TestFairPriorityAndMaxParallel: a higher-priority process is served first; a
// process's max_parallel is never exceeded and is reached.
func TestFairPriorityAndMaxParallel(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		five, two := 5, 2
		fairSubmit(t, db, "low", 20, 0.02, nil)
		fairSubmit(t, db, "high", 20, 0.02, func(p *stages.Plan) { p.Priority = &five })
		fairSubmit(t, db, "capped", 12, 0.25, func(p *stages.Plan) { p.Priority = &five; p.MaxParallel = &two })
		startWorkers(t, db, 6, fastConfig(), nil)
		waitFor(t, 3*time.Minute, "52 tasks", func() bool {
			return len(db.logs(t, dialect.LogFilter{Outcome: dialect.OutcomeSucceeded})) >= 52
		})
		starts := fairStarts(t, db)
		lastHigh, firstLow := -1, -1
		for k, e := range starts {
			switch {
			case e.Process == "high":
				lastHigh = k
			case e.Process == "low" && firstLow < 0:
				firstLow = k
			}
		}
		if firstLow < lastHigh {
			t.Errorf("low-priority process started (claim %d) before the high-priority one had started all its tasks (claim %d)", firstLow+1, lastHigh+1)
		}
		all := runs(db.logs(t, dialect.LogFilter{}))
		got := stages.MaxOverlap(all, func(r stages.Run) bool { return r.Process == "capped" })
		if got != 2 {
			t.Errorf("capped process ran %d at once, want exactly its max_parallel 2", got)
		}
	})
}
