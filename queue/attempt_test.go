package queue

import (
	"runtime"
	"testing"
	"time"
)

// A body may skip reading its lease only while less than half a lease has
// passed since its claim was sent, by a clock that counts suspension; without
// such a clock it always reads it.
func TestLeaseHeldOnlyWhileFresh(t *testing.T) {
	w := &Worker{cfg: WorkerConfig{Lease: 2 * time.Second}}
	now, ok := bootClock()
	if runtime.GOOS == "linux" && !ok {
		t.Fatal("no boot clock on Linux")
	}
	if !ok {
		if w.leaseHeld(attempt{claimSent: time.Hour}) {
			t.Fatal("a lease vouched for without a clock that counts suspension")
		}
		return
	}
	cases := []struct {
		name string
		sent time.Duration
		want bool
	}{
		{"claimed just now", now, true},
		{"claimed half a second ago", now - 500*time.Millisecond, true},
		{"claimed a whole half lease ago", now - time.Second, false},
		{"claimed a lease ago", now - 2*time.Second, false},
		{"claim time unknown", 0, false},
	}
	for _, c := range cases {
		if got := w.leaseHeld(attempt{claimSent: c.sent}); got != c.want {
			t.Errorf("%s: leaseHeld = %v, want %v", c.name, got, c.want)
		}
	}
	if later, _ := bootClock(); later < now {
		t.Errorf("boot clock went back: %v then %v", now, later)
	}
}
