package queue

import (
	"testing"
	"time"
)

// TestVacuumWait: vacuums take at most about a tenth of the time, and a pass
// asked for too soon waits for the rest of that time; the first never waits.
func TestVacuumWait(t *testing.T) {
	for _, c := range []struct {
		since, took, want time.Duration
	}{
		{time.Hour, 0, 0}, // the first pass
		{0, 0, 0},         // asked again at once after an instant one
		{time.Second, 100 * time.Millisecond, 0},
		{900 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond},
		{5 * time.Second, time.Second, 5 * time.Second}, // a vacuum of a large table: the claims set the pace
	} {
		if got := vacuumWait(c.since, c.took); got != c.want {
			t.Errorf("vacuumWait(%s since the last, which took %s) = %s; want %s", c.since, c.took, got, c.want)
		}
	}
}
