package sqlbase

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// LeaseStatements are a dialect's texts for exclusive leases. The changes run
// on the pool, or each in a transaction of its own (Base.LeasesInTx).
type LeaseStatements struct {
	// Acquire takes a lease in one statement: a new one (token 1), a released
	// or expired one (token + 1, the fence), or the holder's own live one (same
	// token). In: name, holder, TTL (Interval). Out: token, acquired_at,
	// expires_at, now; no row when another holder has it.
	Acquire string
	// Get reads one lease. In: name. Out: holder, token, acquired_at,
	// expires_at, now.
	Get string
	// Extend pushes the expiry of a live lease held with the token. In: name,
	// holder, token, TTL (Interval). Out: acquired_at, expires_at, now; no row
	// when it was lost.
	Extend string
	// Release frees a lease, fenced by holder and token; the row stays so the
	// next token is higher. In: name, holder, token.
	Release string
	// List: in name ("" for all), held only. Out: name, holder, token,
	// acquired_at, expires_at, now, by name.
	List string
}

// scanLease reads the leading destinations, then acquired_at, expires_at and
// now into l.
func scanLease(row *sql.Row, l *dialect.LeaseInfo, lead ...any) error {
	var acquired, expires, now dialect.TimeScan
	if err := row.Scan(append(lead, &acquired, &expires, &now)...); err != nil {
		return err
	}
	l.AcquiredAt, l.ExpiresAt, l.Now = acquired.Time, expires.Time, now.Time
	return nil
}

// LeaseTryAcquire implements dialect.Scheduler.
func (b *Base) LeaseTryAcquire(ctx context.Context, lp dialect.LeaseAcquireParams) (dialect.LeaseInfo, bool, error) {
	var l dialect.LeaseInfo
	acquired := false
	err := b.leaseRun(ctx, true, func(ctx context.Context, q dialect.Querier) error {
		l = dialect.LeaseInfo{Name: lp.Name, Holder: lp.Holder}
		err := scanLease(q.QueryRowContext(ctx, b.Lease.Acquire, lp.Name, lp.Holder, b.Interval(lp.TTL)), &l, &l.Token)
		if err == nil {
			acquired = true
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return b.MapErr(err)
		}
		// Held by someone else: say by whom, for the caller's message.
		l = dialect.LeaseInfo{Name: lp.Name}
		err = scanLease(q.QueryRowContext(ctx, b.Lease.Get, lp.Name), &l, &l.Holder, &l.Token)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("read holder: %w", b.MapErr(err))
		}
		return nil
	})
	if err != nil {
		return l, false, fmt.Errorf("acquire lease %q: %w", lp.Name, err)
	}
	return l, acquired, nil
}

// LeaseExtend implements dialect.Scheduler.
func (b *Base) LeaseExtend(ctx context.Context, lp dialect.LeaseExtendParams) (dialect.LeaseInfo, error) {
	l := dialect.LeaseInfo{Name: lp.Name, Holder: lp.Holder, Token: lp.Token}
	err := b.leaseRun(ctx, true, func(ctx context.Context, q dialect.Querier) error {
		return scanLease(q.QueryRowContext(ctx, b.Lease.Extend, lp.Name, lp.Holder, lp.Token, b.Interval(lp.TTL)), &l)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return l, fmt.Errorf("extend lease %q (token %d): %w%s", lp.Name, lp.Token, dialect.ErrLeaseLost, b.lostWhy(ctx, lp.Name, lp.Holder, lp.Token))
	}
	if err != nil {
		return l, fmt.Errorf("extend lease %q: %w", lp.Name, b.MapErr(err))
	}
	return l, nil
}

// LeaseRelease implements dialect.Scheduler.
func (b *Base) LeaseRelease(ctx context.Context, lp dialect.LeaseReleaseParams) error {
	var n int64
	// Not repeated after a lost answer: a release that did happen would then
	// report the lease lost.
	err := b.leaseRun(ctx, false, func(ctx context.Context, q dialect.Querier) error {
		var err error
		if n, err = b.execCount(ctx, q, b.Lease.Release, lp.Name, lp.Holder, lp.Token); err != nil {
			return b.MapErr(err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("release lease %q: %w", lp.Name, err)
	}
	if n != 1 {
		return fmt.Errorf("release lease %q (token %d): %w%s", lp.Name, lp.Token, dialect.ErrLeaseLost, b.lostWhy(ctx, lp.Name, lp.Holder, lp.Token))
	}
	return nil
}

// lostWhy reads a lease whose extend or release failed its fence and says
// why, for the error: another holder name (a script run from another shell
// has another default holder), a later token, or no live holder. Empty when
// the read fails: the error stands without it.
func (b *Base) lostWhy(ctx context.Context, name, holder string, token int64) string {
	l := dialect.LeaseInfo{Name: name}
	if err := scanLease(b.Pool.QueryRowContext(ctx, b.Lease.Get, name), &l, &l.Holder, &l.Token); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return ": no such lease"
		}
		return ""
	}
	switch {
	case !l.Held():
		return fmt.Sprintf(": it has no live holder (token %d expired or was released)", l.Token)
	case l.Holder != holder:
		return fmt.Sprintf(": it is held by %q (token %d), not by %q; give the holder it was acquired with (--holder, STAGEQ_LEASE_HOLDER)", l.Holder, l.Token, holder)
	case l.Token != token:
		return fmt.Sprintf(": %q holds it with token %d now", l.Holder, l.Token)
	}
	return ""
}

// LeaseList implements dialect.Scheduler.
func (b *Base) LeaseList(ctx context.Context, f dialect.LeaseFilter) ([]dialect.LeaseInfo, error) {
	return list(ctx, b, "leases", b.Lease.List, dialect.ScanLeaseInfo, f.Name, f.HeldOnly)
}

// leaseRun runs one lease change on the pool (through Retry; repeatable as
// onPool), or in a write transaction of its own where the dialect needs one
// (LeasesInTx).
func (b *Base) leaseRun(ctx context.Context, repeatable bool, fn func(ctx context.Context, q dialect.Querier) error) error {
	if b.LeasesInTx {
		return b.InTx(ctx, nil, func(q dialect.Querier) error { return fn(ctx, q) })
	}
	return b.onPool(ctx, repeatable, func(ctx context.Context) error { return fn(ctx, b.Pool) })
}
