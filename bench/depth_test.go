package bench

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestDepthTurns runs the depth scenario at small sizes on each dialect that
// always runs here: every case is filled, measured in every turn, and the two
// large cases are given as ratios to the small one; no case claims a task of
// the blocked process (depthPairs fails the case if it does).
func TestDepthTurns(t *testing.T) {
	forEachLocalTarget(t, func(t *testing.T, tg *target) {
		cfg := NewConfig()
		cfg.DepthSmall, cfg.DepthLarge, cfg.DepthOps, cfg.Timeout = 200, 2000, 60, 2*time.Minute
		r := &runner{cfg: cfg}
		got := r.depth(context.Background(), tg)
		want := []string{"depth/pending-small", "depth/pending-large", "depth/blocked-large"}
		if len(got) != len(want) {
			t.Fatalf("%d results, want %d", len(got), len(want))
		}
		for i, res := range got {
			if res.Scenario != want[i] || res.Error != "" || res.TimedOut {
				t.Fatalf("result %d: %s, error %q, timed out %v", i, res.Scenario, res.Error, res.TimedOut)
			}
			if res.Samples != cfg.DepthOps || res.P50Ms <= 0 {
				t.Errorf("%s: %d samples (want %d), p50 %v ms", res.Scenario, res.Samples, cfg.DepthOps, res.P50Ms)
			}
			if res.Extra["turns"] != depthRounds {
				t.Errorf("%s: turns %v, want %d", res.Scenario, res.Extra["turns"], depthRounds)
			}
			if (i > 0) != (res.Ratio > 0) {
				t.Errorf("%s: ratio %v", res.Scenario, res.Ratio)
			}
		}
		if got[2].Extra["blocked"] != 2000 || got[2].N != 2200 {
			t.Errorf("blocked case: %v blocked, N %d", got[2].Extra["blocked"], got[2].N)
		}
	})
}

// TestDepthResults: a case that failed reports its error and nothing else (not
// a time-out), one that measured fewer pairs than asked ran out of time, and
// the large cases' ratios divide by the small case's median.
func TestDepthResults(t *testing.T) {
	cfg := NewConfig()
	cfg.DepthOps = 10
	durations := func(n int, each time.Duration) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = each
		}
		return out
	}
	cases := []*depthDB{
		{dc: depthCase{scenario: "depth/pending-small", pending: 100}, total: durations(10, 2*time.Millisecond), claim: durations(10, time.Millisecond)},
		{dc: depthCase{scenario: "depth/pending-large", pending: 1000}, total: durations(3, time.Millisecond), err: errors.New("claim: boom")},
		{dc: depthCase{scenario: "depth/blocked-large", pending: 100, blocked: 900}, total: durations(5, 3*time.Millisecond), claim: durations(5, time.Millisecond)},
	}
	got := depthResults(cases, cfg)
	if len(got) != 3 {
		t.Fatalf("%d results, want 3", len(got))
	}
	if got[0].TimedOut || got[0].Error != "" || got[0].Samples != 10 || got[0].Ratio != 0 {
		t.Errorf("small case: %+v", got[0])
	}
	if got[1].Error != "claim: boom" || got[1].TimedOut || got[1].Samples != 0 {
		t.Errorf("failed case: error %q, timed out %v, %d samples", got[1].Error, got[1].TimedOut, got[1].Samples)
	}
	if !got[2].TimedOut || got[2].Error != "" || got[2].Samples != 5 || got[2].Ratio != 1.5 {
		t.Errorf("short case: timed out %v, error %q, %d samples, ratio %v (want true, none, 5, 1.5)", got[2].TimedOut, got[2].Error, got[2].Samples, got[2].Ratio)
	}
}

// TestPairsInTurn: the turns together measure exactly the pairs asked for.
func TestPairsInTurn(t *testing.T) {
	for _, ops := range []int{0, 1, 9, 10, 65, 2000} {
		sum := 0
		for round := 0; round < depthRounds; round++ {
			sum += pairsInTurn(ops, round)
		}
		if sum != ops {
			t.Errorf("DepthOps %d: the turns measure %d pairs", ops, sum)
		}
	}
}
