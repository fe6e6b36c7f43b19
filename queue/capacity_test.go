package queue

import (
	"testing"
	"time"
)

// The prefetch buffer holds about prefetchWindow's worth of work, within its
// bounds, and nothing before enough bodies have run to judge.
func TestPrefetchFollowsBodyLength(t *testing.T) {
	cases := []struct {
		body        time.Duration
		concurrency int
		want        int
	}{
		{0, 64, 448},                    // no-op bodies: maxPrefetchFactor × 64
		{time.Microsecond, 1000, 1024},  // capped at maxPrefetch
		{10 * time.Millisecond, 64, 64}, // one window: one concurrency's worth
		{100 * time.Millisecond, 64, 6},
		{time.Second, 64, 0},
	}
	for _, c := range cases {
		var clock bodyClock
		for range 15 {
			clock.observe(c.body)
		}
		if got := clock.prefetch(c.concurrency); got != 0 {
			t.Errorf("after 15 bodies of %s: prefetch %d, want 0 (too few to judge)", c.body, got)
		}
		clock.observe(c.body)
		if got := clock.prefetch(c.concurrency); got != c.want {
			t.Errorf("bodies of %s, concurrency %d: prefetch %d, want %d", c.body, c.concurrency, got, c.want)
		}
	}
}

// A handed-back buffer resets the clock: no prefetching until 16 more bodies
// have run; and the average follows bodies that grow longer.
func TestPrefetchAfterResetAndLongerBodies(t *testing.T) {
	var clock bodyClock
	for range 100 {
		clock.observe(time.Microsecond)
	}
	if clock.prefetch(8) != 56 {
		t.Fatalf("prefetch %d after short bodies, want 56", clock.prefetch(8))
	}
	clock.reset()
	for i := range 16 {
		if got := clock.prefetch(8); got != 0 {
			t.Fatalf("prefetch %d after a reset and %d bodies, want 0", got, i)
		}
		clock.observe(time.Microsecond)
	}
	if clock.prefetch(8) == 0 {
		t.Fatal("no prefetch after a reset and 16 short bodies")
	}
	// Bodies of 40 ms: the average passes 20 ms within 16 of them, where a
	// worker of concurrency 8 prefetches 4 or fewer; at 40 ms, 2.
	for range 16 {
		clock.observe(40 * time.Millisecond)
	}
	if got := clock.prefetch(8); got > 4 {
		t.Fatalf("prefetch %d after 16 bodies of 40ms, want at most 4", got)
	}
	for range 100 {
		clock.observe(40 * time.Millisecond)
	}
	if got := clock.prefetch(8); got != 2 {
		t.Fatalf("prefetch %d after many bodies of 40ms, want 2", got)
	}
}
