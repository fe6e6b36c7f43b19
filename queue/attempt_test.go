package queue

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
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

// The heartbeat loop re-arms the fail-fast deadline of unextended attempts
// only when told of a claim whose lease may end before the one it armed for;
// a write-lock hold (SQLite) moves a claim's lease later by what it held.
func TestUnextendedWakesOnlyForEarlierClaims(t *testing.T) {
	w := &Worker{
		cfg:        WorkerConfig{Lease: 10 * time.Second, Heartbeat: 2 * time.Second},
		running:    map[dialect.TaskLease]context.CancelCauseFunc{},
		unextended: map[dialect.TaskLease]claimMark{},
		admitted:   make(chan struct{}, 1),
	}
	t0 := time.Now()
	woke := func() bool {
		select {
		case <-w.admitted:
			return true
		default:
			return false
		}
	}
	note := func(id int64, m claimMark, wantWake bool) {
		t.Helper()
		key := dialect.TaskLease{ID: id, Token: 1}
		w.running[key] = func(error) {}
		w.noteUnextendedLocked(key, m)
		if got := woke(); got != wantWake {
			t.Errorf("task %d (claim sent %v, held %v): woke the heartbeat loop = %v, want %v",
				id, m.sent.Sub(t0), m.held, got, wantWake)
		}
	}
	note(1, claimMark{sent: t0}, true)  // the first
	note(8, claimMark{sent: t0}, false) // the same claim batch
	note(2, claimMark{sent: t0.Add(time.Second)}, false)
	note(3, claimMark{sent: t0.Add(-time.Second)}, true)
	// Sent during a hold of the write lock that ended after t0+4s: counted
	// from its answer, the hold puts its lease's start before task 3's.
	note(4, claimMark{sent: t0.Add(2 * time.Second), held: 4 * time.Second}, true)
	note(5, claimMark{sent: t0.Add(2 * time.Second), held: time.Second}, false)

	// Tasks 3 and 4 end: the deadline is due by task 1's claim, and an
	// earlier claim than that wakes the loop again.
	// Holds of the write lock since put every lease back by their time.
	delete(w.running, dialect.TaskLease{ID: 3, Token: 1})
	delete(w.running, dialect.TaskLease{ID: 4, Token: 1})
	w.holder = heldFor(5 * time.Second)
	due, ok := w.claimsDue()
	if want := t0.Add(5*time.Second + w.cfg.Lease - w.failFastMargin()); !ok || !due.Equal(want) {
		t.Fatalf("claimsDue = %v, %v; want %v (task 1's claim, 5s of holds since)", due.Sub(t0), ok, want.Sub(t0))
	}
	if len(w.unextended) != 4 {
		t.Errorf("%d unextended attempts after claimsDue, want 4 (the ended ones dropped)", len(w.unextended))
	}
	note(6, claimMark{sent: t0.Add(-500 * time.Millisecond)}, true)

	// Once none is left, the next claim wakes it whatever its time.
	clear(w.running)
	if _, ok := w.claimsDue(); ok {
		t.Fatal("claimsDue found a deadline with no attempt running")
	}
	note(7, claimMark{sent: t0.Add(time.Hour)}, true)
}

// heldFor is a write-lock holder (dialect.WriteLockHolder) whose holds, none of
// them lasting now, have come to d.
type heldFor time.Duration

func (h heldFor) WriteHolds() (bool, time.Duration) { return false, time.Duration(h) }

// TestHeartbeatDefaultsWithinTheDeadWindow: readers judge a worker dead after
// a minute without a heartbeat, so a long lease does not stretch the default
// heartbeat (a third of the lease) past MaxHeartbeat, and a longer one given
// is refused.
func TestHeartbeatDefaultsWithinTheDeadWindow(t *testing.T) {
	for lease, want := range map[time.Duration]time.Duration{30 * time.Second: 10 * time.Second, 5 * time.Minute: MaxHeartbeat} {
		c := WorkerConfig{Lease: lease}
		if err := c.setDefaults(); err != nil || c.Heartbeat != want {
			t.Errorf("lease %s: heartbeat %s, %v; want %s", lease, c.Heartbeat, err, want)
		}
	}
	c := WorkerConfig{Lease: 5 * time.Minute, Heartbeat: time.Minute}
	if err := c.setDefaults(); err == nil {
		t.Errorf("heartbeat of a minute accepted")
	}
}
