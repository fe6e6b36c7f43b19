package queue

import (
	"testing"
	"time"
)

// TestVacuumNow: vacuums take at most about a tenth of the time; the first
// always runs.
func TestVacuumNow(t *testing.T) {
	for _, c := range []struct {
		since, took time.Duration
		want        bool
	}{
		{time.Hour, 0, true}, // the first pass
		{0, 0, true},         // asked again at once after an instant one
		{time.Second, 100 * time.Millisecond, true},
		{900 * time.Millisecond, 100 * time.Millisecond, false},
		{5 * time.Second, time.Second, false}, // a vacuum of a large table: the claims set the pace
	} {
		if got := vacuumNow(c.since, c.took); got != c.want {
			t.Errorf("vacuumNow(%s since the last, which took %s) = %v; want %v", c.since, c.took, got, c.want)
		}
	}
}
