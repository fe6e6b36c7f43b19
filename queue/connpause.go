package queue

import (
	"sync"
	"time"
)

// connPause holds the claim loop back while bodies cannot get a database
// connection (the server has no slot left, is restarting, refuses this
// worker): a task claimed then would only be handed back. Each failure in a
// row doubles the pause, from connPauseMin up to connPauseMax; a body that
// gets its connection ends it.
type connPause struct {
	mu    sync.Mutex
	until time.Time
	next  time.Duration
}

const (
	connPauseMin = 500 * time.Millisecond
	connPauseMax = 30 * time.Second
)

// failed notes a body that could not get a connection and returns how long
// claims now wait.
func (p *connPause) failed(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next = min(max(p.next*2, connPauseMin), connPauseMax)
	if u := now.Add(p.next); u.After(p.until) {
		p.until = u
	}
	return p.next
}

// ok notes a body that got its connection.
func (p *connPause) ok() {
	p.mu.Lock()
	p.next, p.until = 0, time.Time{}
	p.mu.Unlock()
}

// left is how long claims still wait (0: they may go on).
func (p *connPause) left(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(p.until.Sub(now), 0)
}
