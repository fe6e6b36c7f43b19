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

// A run of long bodies after short ones stops the prefetching within a few
// dozen bodies.
func TestPrefetchStopsWhenBodiesGrowLong(t *testing.T) {
	var clock bodyClock
	for range 100 {
		clock.observe(time.Microsecond)
	}
	for range 50 {
		clock.observe(5 * time.Second)
	}
	if got := clock.prefetch(8); got != 0 {
		t.Fatalf("prefetch %d after 50 bodies of 5s, want 0", got)
	}
}
