package bench

import (
	"context"
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
			if (i > 0) != (res.Ratio > 0) {
				t.Errorf("%s: ratio %v", res.Scenario, res.Ratio)
			}
		}
		if got[2].Extra["blocked"] != 2000 || got[2].N != 2200 {
			t.Errorf("blocked case: %v blocked, N %d", got[2].Extra["blocked"], got[2].N)
		}
	})
}
