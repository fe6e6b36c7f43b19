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

// depth measures TaskClaim of one task plus its TaskFinish with DepthSmall and
// DepthLarge pending tasks, and with DepthLarge tasks blocked behind a running
// stage of another process, each in a fresh database, and gives each case's
// median as a ratio to the small case's.
func (r *runner) depth(ctx context.Context, t *target) []Result {
	cfg := r.cfg
	cases := []depthCase{
		{scenario: "depth/pending-small", pending: cfg.DepthSmall},
		{scenario: "depth/pending-large", pending: cfg.DepthLarge},
		{scenario: "depth/blocked-large", pending: cfg.DepthSmall, blocked: cfg.DepthLarge},
	}
	var out []Result
	var base time.Duration
	for _, dc := range cases {
		res := Result{Dialect: t.name, Scenario: dc.scenario, N: dc.pending + dc.blocked, Concurrency: 1}
		r.cfg.progress("%s: %s: %d pending, %d blocked", t.name, dc.scenario, dc.pending, dc.blocked)
		total, claim, err := r.depthCase(ctx, t, dc, &res)
		if err != nil {
			res.Error = err.Error()
			out = append(out, res)
			continue
		}
		res.Samples = len(total)
		p50 := percentile(total, 50)
		res.P50Ms, res.P99Ms = ms(p50), ms(percentile(total, 99))
		res.set("claim_p50_ms", ms(percentile(claim, 50)))
		res.set("claim_p99_ms", ms(percentile(claim, 99)))
		res.set("pending", dc.pending)
		res.set("blocked", dc.blocked)
		if dc.scenario == "depth/pending-small" {
			base = p50
		}
		res.Summary = fmt.Sprintf("claim+finish p50 %.2f ms, p99 %.2f ms", res.P50Ms, res.P99Ms)
		if base > 0 && dc.scenario != "depth/pending-small" {
			res.Ratio = float64(p50) / float64(base)
			res.Summary += fmt.Sprintf(", %.2fx the %s-task figure", res.Ratio, thousands(float64(cfg.DepthSmall)))
		}
		if dc.blocked > 0 {
			res.note("%s pending + %s blocked behind another process's running stage", thousands(float64(dc.pending)), thousands(float64(dc.blocked)))
		}
		out = append(out, res)
	}
	return out
}

// depthCase fills one database and times DepthOps claim+finish pairs after a
// short warm-up; it returns the pairs' and the claims' durations.
func (r *runner) depthCase(ctx context.Context, t *target, dc depthCase, res *Result) (total, claim []time.Duration, err error) {
	cfg := r.cfg
	_, c, drop, err := t.migrated(ctx, "depth")
	if err != nil {
		return nil, nil, err
	}
	defer drop()
	d := c.Dialect()
	fillStart := time.Now()
	if dc.blocked > 0 {
		// The other process: one task at order 100, claimed and left running by
		// another worker, and the bulk at order 200 behind it.
		one, two := 100, 200
		plan := stages.Plan{Process: "huge", Stages: []stages.Stage{
			{Order: &one, Tasks: []stages.Task{{Kind: kindNoop, Body: "long"}}},
			{Order: &two, Tasks: []stages.Task{{Kind: kindNoop, Body: "noop"}}},
		}}
		sr, err := c.Submit(ctx, plan)
		if err != nil {
			return nil, nil, fmt.Errorf("submit the blocking process: %w", err)
		}
		got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "elsewhere", Max: 1, Token: 1, Lease: time.Hour})
		if err != nil || len(got) != 1 {
			return nil, nil, fmt.Errorf("claim the blocking task: %v (%d claimed)", err, len(got))
		}
		if err := fill(ctx, d, sr.ProcessID, two, dc.blocked-1, dialect.StateBlocked); err != nil {
			return nil, nil, err
		}
	}
	sr, err := c.Submit(ctx, onePlan("depth", kindNoop, "noop", 1))
	if err != nil {
		return nil, nil, fmt.Errorf("submit: %w", err)
	}
	if err := fill(ctx, d, sr.ProcessID, 0, dc.pending-1, dialect.StateAvailable); err != nil {
		return nil, nil, err
	}
	res.set("fill_s", time.Since(fillStart).Seconds())

	deadline := time.Now().Add(cfg.Timeout)
	warm := min(50, cfg.DepthOps)
	for i := 0; i < warm+cfg.DepthOps && time.Now().Before(deadline); i++ {
		t0 := time.Now()
		got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "bench", Max: 1, Token: rand.Int64N(1<<62) + 1, Lease: time.Minute})
		if err != nil {
			return nil, nil, fmt.Errorf("claim: %w", err)
		}
		if len(got) != 1 {
			return nil, nil, fmt.Errorf("claim %d returned %d tasks, want 1", i, len(got))
		}
		if got[0].Process != "depth" {
			return nil, nil, fmt.Errorf("claimed a task of process %q: the barrier let it through", got[0].Process)
		}
		t1 := time.Now()
		if err := d.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: got[0].ID, Token: got[0].Token, Outcome: dialect.OutcomeSucceeded}); err != nil {
			return nil, nil, fmt.Errorf("finish: %w", err)
		}
		t2 := time.Now()
		if i >= warm {
			claim = append(claim, t1.Sub(t0))
			total = append(total, t2.Sub(t0))
		}
	}
	if len(total) < cfg.DepthOps {
		res.TimedOut = true
	}
	if len(total) == 0 {
		return nil, nil, fmt.Errorf("no claim measured within %s", cfg.Timeout)
	}
	return total, claim, nil
}
