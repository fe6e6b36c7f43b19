// Package lease provides exclusive leases: named locks, shared by every process
// that points at one stageq database, with an expiry on the database's clock and
// a fencing token. They guard jobs that must run on one instance at a time.
//
//	lk := lease.New(client.Dialect(), lease.Options{})
//	err := lk.Hold(ctx, "nightly-report", 30*time.Second, func(ctx context.Context) error {
//	    return report(ctx) // ctx ends the moment the lease cannot be extended
//	})
//	if errors.Is(err, lease.ErrNotAcquired) { /* another instance runs it */ }
//
// The design is seed 003's expiring lock row, with the gaps closed: expiry is
// judged by the database's clock, not the instances' (so skew does not matter);
// every new holder gets a higher fencing token, which it can hand to the systems
// it writes to so they refuse a stale holder's late writes; Extend fails once the
// lease has expired, even if nobody took it yet, so a holder that stalled (a GC
// pause, SIGSTOP, a network partition) learns it must stop; and Release is fenced,
// so a stale holder cannot free its successor's lease.
//
// A holder is a Locker's identity (Options.Holder): TryAcquire by the same holder
// while its lease is live re-acquires it with the same token and a new expiry
// (reentrant, not counted: one Release frees it). A Locker therefore excludes
// other Lockers, not its own callers: goroutines of one process that must not
// run the guarded work at once each need a Locker (a holder) of their own.
package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/stageq/stageq/dialect"
)

var (
	// ErrNotAcquired means another holder has a live lease; see HeldError.
	ErrNotAcquired = errors.New("lease is held by another holder")
	// ErrLost means the lease expired or passed to another holder: stop the work
	// it guarded. It is dialect.ErrLeaseLost, so errors.Is works with either.
	ErrLost = dialect.ErrLeaseLost
	// ErrInvalid means the name or ttl was refused; nothing was asked of the database.
	ErrInvalid = errors.New("invalid lease request")
)

// MinTTL is the shortest lease: shorter ones cannot be extended in time across a
// network round trip.
const MinTTL = 100 * time.Millisecond

// HeldError is returned by TryAcquire when another holder has the lease. It
// wraps ErrNotAcquired.
type HeldError struct {
	Name      string
	Holder    string
	Token     int64
	ExpiresAt time.Time
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("lease %q is held by %s (token %d) until %s", e.Name, e.Holder, e.Token,
		e.ExpiresAt.UTC().Format(time.RFC3339Nano))
}

// Unwrap makes errors.Is(err, ErrNotAcquired) true.
func (e *HeldError) Unwrap() error { return ErrNotAcquired }

// Options configures a Locker.
type Options struct {
	// Holder identifies this instance; default host-pid-random. Two Lockers with
	// the same Holder are the same holder (reentrancy).
	Holder string
}

// Locker acquires leases for one holder. It is safe for concurrent use.
type Locker struct {
	d      dialect.Scheduler
	holder string
}

// New returns a Locker on a stageq database (queue.Client.Dialect()).
func New(d dialect.Scheduler, opts Options) *Locker {
	if opts.Holder == "" {
		host, _ := os.Hostname()
		opts.Holder = fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), rand.IntN(1<<16))
	}
	return &Locker{d: d, holder: opts.Holder}
}

// Holder is the Locker's identity as recorded in the lease.
func (lk *Locker) Holder() string { return lk.holder }

// Lease is a held lease. Its methods are safe for concurrent use.
type Lease struct {
	lk    *Locker
	name  string
	ttl   time.Duration
	token int64
	// The database's expiry as last confirmed, and the local monotonic instant
	// before which the lease is certainly still held: the request that confirmed
	// it was sent at or after that instant minus ttl.
	state chan leaseState // one-slot mutex carrying the state
}

type leaseState struct {
	expiresAt time.Time // database clock
	safeUntil time.Time // local monotonic clock
	lost      bool
}

// TryAcquire takes the named lease for ttl if it is free, expired or already
// this holder's. When another holder has it, the error is a *HeldError (which
// wraps ErrNotAcquired).
func (lk *Locker) TryAcquire(ctx context.Context, name string, ttl time.Duration) (*Lease, error) {
	if err := validate(name, ttl); err != nil {
		return nil, err
	}
	sent := time.Now()
	info, ok, err := lk.d.LeaseTryAcquire(ctx, dialect.LeaseAcquireParams{Name: name, Holder: lk.holder, TTL: ttl})
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &HeldError{Name: name, Holder: info.Holder, Token: info.Token, ExpiresAt: info.ExpiresAt}
	}
	l := &Lease{lk: lk, name: name, ttl: ttl, token: info.Token, state: make(chan leaseState, 1)}
	l.state <- leaseState{expiresAt: info.ExpiresAt, safeUntil: sent.Add(ttl)}
	return l, nil
}

func validate(name string, ttl time.Duration) error {
	switch {
	case name == "" || len(name) > 200:
		return fmt.Errorf("%w: lease name must be 1 to 200 characters, got %q", ErrInvalid, name)
	case ttl < MinTTL:
		return fmt.Errorf("%w: lease %q: ttl must be at least %s, got %s", ErrInvalid, name, MinTTL, ttl)
	}
	return nil
}

// Name is the lease's name.
func (l *Lease) Name() string { return l.name }

// Token is the fencing token: higher than every earlier holder's. Pass it to
// the systems the guarded work writes to, so they can refuse older tokens.
func (l *Lease) Token() int64 { return l.token }

// TTL is how long each acquisition or extension keeps the lease.
func (l *Lease) TTL() time.Duration { return l.ttl }

// ExpiresAt is the expiry (database clock) as last confirmed.
func (l *Lease) ExpiresAt() time.Time {
	s := <-l.state
	l.state <- s
	return s.expiresAt
}

// Valid reports whether the lease is certainly still held by local reckoning:
// not known lost, and its ttl has not run out since the last confirmation was
// requested. False does not mean lost, only that it is no longer safe to assume.
func (l *Lease) Valid() bool {
	s := <-l.state
	l.state <- s
	return !s.lost && time.Now().Before(s.safeUntil)
}

// Extend pushes the expiry to the database's now plus the ttl. It fails with
// ErrLost once the lease has expired or passed to another holder, and keeps
// failing after that: a lost lease is never regained by extending it.
func (l *Lease) Extend(ctx context.Context) error {
	s := <-l.state
	defer func() { l.state <- s }()
	if s.lost {
		return fmt.Errorf("extend lease %q (token %d): %w", l.name, l.token, ErrLost)
	}
	sent := time.Now()
	info, err := l.lk.d.LeaseExtend(ctx, dialect.LeaseExtendParams{Name: l.name, Holder: l.lk.holder, Token: l.token, TTL: l.ttl})
	if errors.Is(err, ErrLost) {
		s.lost = true
		return err
	}
	if err != nil {
		return fmt.Errorf("extend lease %q: %w", l.name, err)
	}
	s.expiresAt, s.safeUntil = info.ExpiresAt, sent.Add(l.ttl)
	return nil
}

// Release frees the lease so another holder may take it at once. It is fenced:
// when the lease was lost it changes nothing and returns ErrLost.
func (l *Lease) Release(ctx context.Context) error {
	s := <-l.state
	defer func() { l.state <- s }()
	err := l.lk.d.LeaseRelease(ctx, dialect.LeaseReleaseParams{Name: l.name, Holder: l.lk.holder, Token: l.token})
	s.lost = true // released or lost: either way no longer ours
	return err
}

// Hold takes the named lease (TryAcquire), runs fn while keeping it alive, and
// releases it when fn returns. See Lease.Hold.
func (lk *Locker) Hold(ctx context.Context, name string, ttl time.Duration, fn func(ctx context.Context) error) error {
	l, err := lk.TryAcquire(ctx, name, ttl)
	if err != nil {
		return err
	}
	return l.Hold(ctx, fn)
}

// Hold runs fn while extending the lease every ttl/3, then releases it. fn's
// context is cancelled, with cause ErrLost, the moment the lease cannot be
// extended: when the database says it was lost, or when the ttl has run out
// since the last extension that succeeded was requested (the database may be
// unreachable, or this process was paused; either way another holder may have
// it now). Hold returns fn's error, joined with an error wrapping ErrLost when
// the lease was lost while fn ran.
func (l *Lease) Hold(ctx context.Context, fn func(ctx context.Context) error) error {
	fnCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	keeperDone := make(chan error, 1)
	stopKeeper := make(chan struct{})
	go func() { keeperDone <- l.keep(fnCtx, cancel, stopKeeper) }()

	fnErr := fn(fnCtx)
	close(stopKeeper)
	lostErr := <-keeperDone

	relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), max(l.ttl, 5*time.Second))
	defer relCancel()
	if relErr := l.Release(relCtx); relErr != nil && lostErr == nil {
		if errors.Is(relErr, ErrLost) {
			lostErr = relErr // expired while fn finished: the work may have overlapped a successor
		}
		// Other release errors only delay the next holder until the expiry.
	}
	return errors.Join(fnErr, lostErr)
}

// keep extends the lease until stop closes; on loss it cancels fn's context and
// returns the reason.
func (l *Lease) keep(ctx context.Context, cancel context.CancelCauseFunc, stop <-chan struct{}) error {
	every := l.ttl / 3
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		// Checked before every wait too: after a pause (SIGSTOP, a stalled VM)
		// the overdue tick fires at once and this sees the ttl ran out.
		if !l.Valid() {
			err := l.lostError(ctx)
			cancel(err)
			return err
		}
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return nil // the caller's own cancellation; fn sees it too
		case <-ticker.C:
		}
		if !l.Valid() {
			continue // reported at the top, without trusting a late extension
		}
		ectx, ecancel := context.WithTimeout(ctx, every)
		err := l.Extend(ectx)
		ecancel()
		if errors.Is(err, ErrLost) {
			cancel(err)
			return err
		}
		// Other errors (the database is unreachable) are retried at the next tick
		// until the ttl runs out.
	}
}

// lostError says why a lease that is no longer valid was given up, asking the
// database when it can answer in time.
func (l *Lease) lostError(ctx context.Context) error {
	ectx, cancel := context.WithTimeout(ctx, l.ttl/3)
	defer cancel()
	if err := l.Extend(ectx); errors.Is(err, ErrLost) {
		return err
	}
	// The database extended it (the pause was shorter than the expiry margin) or
	// did not answer: still give it up, because fn may already have run past the
	// instant another holder could have taken over.
	s := <-l.state
	s.lost = true
	l.state <- s
	return fmt.Errorf("lease %q (token %d): not extended within its ttl %s: %w", l.name, l.token, l.ttl, ErrLost)
}

// Leases lists the leases of a database by name; heldOnly leaves out released and
// expired ones.
func Leases(ctx context.Context, d dialect.Scheduler, heldOnly bool) ([]dialect.LeaseInfo, error) {
	return d.LeaseList(ctx, dialect.LeaseFilter{HeldOnly: heldOnly})
}
