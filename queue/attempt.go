package queue

import (
	"time"

	"github.com/stageq/stageq/dialect"
)

// attempt is a claimed task inside the worker, with when its lease was last
// known to be held.
type attempt struct {
	dialect.ClaimedTask
	// claimSent is the boot clock (bootClock) when the claim that leased the
	// task was sent; zero when this system has no such clock.
	claimSent time.Duration
	// claim is the same moment on the monotonic clock, for the fail-fast
	// deadline (heartbeat.go) until a heartbeat extends the lease.
	claim claimMark
}

// claimMark is when a claim was sent, on the monotonic clock, and how long
// this process's atomic bodies had held the write lock by then
// (dialect.WriteLockHolder; counted from the claim's answer instead when one
// held it as the claim was sent: the claim ran after that hold).
type claimMark struct {
	sent time.Time
	held time.Duration
}

// leaseFrom is the earliest moment a lease the claim took can have started,
// given total, the holds of the write lock so far: the claim's sending, put
// back by the holds since. A hold that began after the claim ran found the
// lease valid, and its transaction gave the lease the hold's time; one that
// began before kept the claim from running until it ended.
func (m claimMark) leaseFrom(total time.Duration) time.Time {
	return m.sent.Add(total - m.held)
}

// origin orders claims by their leaseFrom without the holds' total, which
// every claim's leaseFrom adds alike: the claim with the earliest origin has
// the earliest lease.
func (m claimMark) origin() time.Time {
	return m.sent.Add(-m.held)
}

// leaseHeld reports whether a's lease is certainly still held now, so that its
// SQL body may start without reading the lease first (dialect.BodyStart). The
// database set the lease to expire a whole lease after it ran the claim, which
// was after the claim was sent: while less than half a lease has passed since
// then, no rescue can have taken it (the other half allows for the database's
// clock running fast). The boot clock counts time the machine was suspended,
// which a monotonic clock leaves out: a worker woken from a suspension after
// its leases expired must not trust them.
func (w *Worker) leaseHeld(a attempt) bool {
	if a.claimSent == 0 {
		return false
	}
	now, ok := bootClock()
	return ok && now-a.claimSent < w.cfg.Lease/2
}
