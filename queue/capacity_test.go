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

// TestConnPauseDoublesPerBurst: the bodies of one claim that all fail to get
// a connection make one pause, not one doubling each; a failure after that
// pause doubles it, up to its bound, and a body that starts ends it.
func TestConnPauseDoublesPerBurst(t *testing.T) {
	var p connPause
	now := time.Now()
	for range 8 { // eight bodies of one claim
		p.failed(now)
	}
	if got := p.leftAt(now); got != connPauseMin {
		t.Fatalf("after one burst of eight refusals claims wait %s; want %s", got, connPauseMin)
	}
	now = now.Add(connPauseMin)
	if got := p.failed(now); got != 2*connPauseMin {
		t.Fatalf("a refusal after the pause: %s; want %s", got, 2*connPauseMin)
	}
	for range 20 {
		now = now.Add(connPauseMax)
		p.failed(now)
	}
	if got := p.leftAt(now); got != connPauseMax {
		t.Fatalf("after many bursts claims wait %s; want the bound %s", got, connPauseMax)
	}
	p.ok()
	if got := p.leftAt(now); got != 0 {
		t.Fatalf("after a body started claims wait %s; want none", got)
	}
}
