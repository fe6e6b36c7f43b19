package queue

import (
	"sync"
	"sync/atomic"
	"time"
)

// connPause holds the claim loop back while bodies cannot get a database
// connection (the server has no slot left, is restarting, refuses this
// worker): a task claimed then would only be handed back. Each burst of
// failures after the last pause doubles it, from connPauseMin up to
// connPauseMax; a body that gets its connection ends it.
type connPause struct {
	mu     sync.Mutex
	until  time.Time
	next   time.Duration
	paused atomic.Bool // a pause was taken and no body has started since
}

const (
	connPauseMin = 500 * time.Millisecond
	connPauseMax = 30 * time.Second
)

// failed notes a body that could not get a connection and returns how long
// claims now wait. The bodies of one claim fail together: a failure while a
// pause runs belongs to the same burst and leaves it as it is; only one after
// it, from the claims that followed, doubles the next.
func (p *connPause) failed(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.Before(p.until) {
		return p.until.Sub(now)
	}
	p.next = min(max(p.next*2, connPauseMin), connPauseMax)
	p.until = now.Add(p.next)
	p.paused.Store(true)
	return p.next
}

// ok notes a body that got its connection. Every body start calls it: a
// flag spares them the lock while no pause was ever taken.
func (p *connPause) ok() {
	if !p.paused.Load() {
		return
	}
	p.mu.Lock()
	p.next, p.until = 0, time.Time{}
	p.paused.Store(false)
	p.mu.Unlock()
}

// left is how long claims still wait (0: they may go on). The claim loop asks
// on every pass: while no pause was taken it costs one atomic load.
func (p *connPause) left() time.Duration {
	if !p.paused.Load() {
		return 0
	}
	return p.leftAt(time.Now())
}

// leftAt is left as of now.
func (p *connPause) leftAt(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(p.until.Sub(now), 0)
}
