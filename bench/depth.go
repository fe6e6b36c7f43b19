package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/stages"
)

// depthCase is one queue shape of the depth scenario.
type depthCase struct {
	scenario string
	pending  int // available tasks of the measured process
	blocked  int // tasks blocked behind another process's running stage
}

// depthRounds is how many turns the cases take, each case measuring a tenth of
// its DepthOps claim+finish pairs a turn (pairsInTurn).
const depthRounds = 10

// depthDB is one case's filled database and what its pairs took.
type depthDB struct {
	dc           depthCase
	res          Result
	d            dialect.Dialect
	drop         func()
	total, claim []time.Duration
	err          error
}

// depth measures TaskClaim of one task plus its TaskFinish with DepthSmall and
// DepthLarge pending tasks, and with DepthLarge tasks blocked behind a running
// stage of another process, each in a database of its own, and gives each
// case's median as a ratio to the small case's. The databases are filled first
// and the cases then take turns, a slice of the pairs each, so that a slow
// spell of the machine (a neighbour's burst, a checkpoint) falls on every case
// alike rather than on whichever ran at the time: measured one after the other,
// SQLite's small case alone moved by up to 1.85x between runs, and the ratios
// with it.
func (r *runner) depth(ctx context.Context, t *target) []Result {
	cfg := r.cfg
	cases := []*depthDB{
		{dc: depthCase{scenario: "depth/pending-small", pending: cfg.DepthSmall}},
		{dc: depthCase{scenario: "depth/pending-large", pending: cfg.DepthLarge}},
		{dc: depthCase{scenario: "depth/blocked-large", pending: cfg.DepthSmall, blocked: cfg.DepthLarge}},
	}
	for _, c := range cases {
		c.res = Result{Dialect: t.name, Scenario: c.dc.scenario, N: c.dc.pending + c.dc.blocked, Concurrency: 1}
		cfg.progress("%s: %s: %d pending, %d blocked", t.name, c.dc.scenario, c.dc.pending, c.dc.blocked)
		c.err = r.depthFill(ctx, t, c)
	}
	defer func() {
		for _, c := range cases {
			if c.drop != nil {
				c.drop()
			}
		}
	}()

	cfg.progress("%s: depth: %d claim+finish pairs per case, in %d turns", t.name, cfg.DepthOps, depthRounds)
	deadline := time.Now().Add(cfg.Timeout)
	for round := 0; round < depthRounds; round++ {
		for i := range cases {
			c := cases[(round+i)%len(cases)] // a different case goes first each turn
			if c.err != nil {
				continue
			}
			if round == 0 {
				// Warm-up: the statements prepared and the pages read once.
				if _, _, err := depthPairs(ctx, c.d, min(50, cfg.DepthOps), deadline); err != nil {
					c.err = err
					continue
				}
			}
			total, claim, err := depthPairs(ctx, c.d, pairsInTurn(cfg.DepthOps, round), deadline)
			c.total, c.claim = append(c.total, total...), append(c.claim, claim...)
			if err != nil {
				c.err = err
			}
		}
	}
	return depthResults(cases, cfg)
}

// pairsInTurn is how many of ops pairs turn round measures: the turns share
// them out evenly, the first ones one more when they do not divide.
func pairsInTurn(ops, round int) int {
	n := ops / depthRounds
	if round < ops%depthRounds {
		n++
	}
	return n
}

// depthResults gives each case's row: its figures, or its error, and the large
// cases' ratios to the small case's median. A case that ended without an error
// but with fewer than DepthOps pairs ran out of time.
func depthResults(cases []*depthDB, cfg Config) []Result {
	var out []Result
	var base time.Duration
	for _, c := range cases {
		res := &c.res
		if c.err == nil && len(c.total) == 0 {
			c.err = fmt.Errorf("no claim measured within %s", cfg.Timeout)
		}
		if c.err != nil {
			res.Error = c.err.Error()
			out = append(out, *res)
			continue
		}
		res.TimedOut = len(c.total) < cfg.DepthOps
		res.Samples = len(c.total)
		p50 := percentile(c.total, 50)
		res.P50Ms, res.P99Ms = ms(p50), ms(percentile(c.total, 99))
		res.set("claim_p50_ms", ms(percentile(c.claim, 50)))
		res.set("claim_p99_ms", ms(percentile(c.claim, 99)))
		res.set("pending", c.dc.pending)
		res.set("blocked", c.dc.blocked)
		res.set("turns", depthRounds)
		if c.dc.scenario == "depth/pending-small" {
			base = p50
		}
		res.Summary = fmt.Sprintf("claim+finish p50 %.2f ms, p99 %.2f ms", res.P50Ms, res.P99Ms)
		if base > 0 && c.dc.scenario != "depth/pending-small" {
			res.Ratio = float64(p50) / float64(base)
			res.Summary += fmt.Sprintf(", %.2fx the %s-task figure", res.Ratio, thousands(float64(cfg.DepthSmall)))
		}
		if c.dc.blocked > 0 {
			res.note("%s pending + %s blocked behind another process's running stage", thousands(float64(c.dc.pending)), thousands(float64(c.dc.blocked)))
		}
		out = append(out, *res)
	}
	return out
}

// depthFill creates and fills one case's database; c.drop removes it.
func (r *runner) depthFill(ctx context.Context, t *target, c *depthDB) error {
	dc := c.dc
	_, cl, drop, err := t.migrated(ctx, "depth")
	if err != nil {
		return err
	}
	c.drop = drop
	c.d = cl.Dialect()
	fillStart := time.Now()
	if dc.blocked > 0 {
		// The other process: one task at order 100, claimed and left running by
		// another worker, and the bulk at order 200 behind it.
		one, two := 100, 200
		plan := stages.Plan{Process: "huge", Stages: []stages.Stage{
			{Order: &one, Tasks: []stages.Task{{Kind: kindNoop, Body: "long"}}},
			{Order: &two, Tasks: []stages.Task{{Kind: kindNoop, Body: "noop"}}},
		}}
		sr, err := cl.Submit(ctx, plan)
		if err != nil {
			return fmt.Errorf("submit the blocking process: %w", err)
		}
		got, err := c.d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "elsewhere", Max: 1, Token: 1, Lease: time.Hour})
		if err != nil || len(got) != 1 {
			return fmt.Errorf("claim the blocking task: %v (%d claimed)", err, len(got))
		}
		if err := fill(ctx, c.d, sr.ProcessID, two, dc.blocked-1, dialect.StateBlocked); err != nil {
			return err
		}
	}
	sr, err := cl.Submit(ctx, onePlan("depth", kindNoop, "noop", 1))
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	if err := fill(ctx, c.d, sr.ProcessID, 0, dc.pending-1, dialect.StateAvailable); err != nil {
		return err
	}
	c.res.set("fill_s", time.Since(fillStart).Seconds())
	return nil
}

// depthPairs times n claim+finish pairs of one task each (fewer when the
// deadline passes) and returns the pairs' and the claims' durations.
func depthPairs(ctx context.Context, d dialect.Dialect, n int, deadline time.Time) (total, claim []time.Duration, err error) {
	for i := 0; i < n && time.Now().Before(deadline); i++ {
		t0 := time.Now()
		got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "bench", Max: 1, Token: rand.Int64N(1<<62) + 1, Lease: time.Minute})
		if err != nil {
			return total, claim, fmt.Errorf("claim: %w", err)
		}
		if len(got) != 1 {
			return total, claim, fmt.Errorf("claim %d of %d returned %d tasks, want 1", i+1, n, len(got))
		}
		if got[0].Process != "depth" {
			return total, claim, fmt.Errorf("claimed a task of process %q: the barrier let it through", got[0].Process)
		}
		t1 := time.Now()
		if err := d.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: got[0].ID, Token: got[0].Token, Outcome: dialect.OutcomeSucceeded}); err != nil {
			return total, claim, fmt.Errorf("finish: %w", err)
		}
		t2 := time.Now()
		claim = append(claim, t1.Sub(t0))
		total = append(total, t2.Sub(t0))
	}
	return total, claim, nil
}
