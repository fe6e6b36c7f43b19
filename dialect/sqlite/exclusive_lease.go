package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// Every lease statement runs in a BEGIN IMMEDIATE transaction (inTx): an
// autocommit statement that reads, then writes, can fail to upgrade its snapshot
// when another process wrote in between; holding the write lock from the start
// makes it wait its turn instead.

// leaseAcquireSQL takes lease ?1 for holder ?2 until now + ?3 in one statement:
// it inserts a new lease (token 1), takes over a released or expired one (token+1:
// the fence every earlier holder's writes are checked against), or re-acquires
// the holder's own live lease (same token: reentrant). SET expressions see the
// old row, so the CASEs compare the old holder and expiry; 'now' is the same
// for the whole statement. No row comes back when another holder has it.
// Out: token, acquired_at, expires_at, now.
const leaseAcquireSQL = `
INSERT INTO stageq_exclusive_leases (name, holder, token, acquired_at, expires_at)
VALUES (?1, ?2, 1, ` + nowSQL + `, strftime('%Y-%m-%d %H:%M:%f', 'now', ?3))
ON CONFLICT (name) DO UPDATE
   SET token = CASE WHEN holder = excluded.holder AND expires_at > ` + nowSQL + ` THEN token ELSE token + 1 END,
       acquired_at = CASE WHEN holder = excluded.holder AND expires_at > ` + nowSQL + ` THEN acquired_at ELSE excluded.acquired_at END,
       holder = excluded.holder,
       expires_at = excluded.expires_at,
       updated_at = ` + nowSQL + `
 WHERE holder IS NULL OR expires_at <= ` + nowSQL + ` OR holder = excluded.holder
RETURNING token, acquired_at, expires_at, ` + nowSQL

// In: name. Out: holder, token, acquired, expires, now.
const leaseGetSQL = `
SELECT coalesce(holder, ''), token, acquired_at, expires_at, ` + nowSQL + ` FROM stageq_exclusive_leases WHERE name = ?`

// LeaseTryAcquire implements dialect.Scheduler.
func (s *SQLite) LeaseTryAcquire(ctx context.Context, lp dialect.LeaseAcquireParams) (dialect.LeaseInfo, bool, error) {
	var (
		l        dialect.LeaseInfo
		acquired bool
	)
	err := s.inTx(ctx, nil, func(q dialect.Querier) error {
		l = dialect.LeaseInfo{Name: lp.Name, Holder: lp.Holder}
		var times [3]string
		err := q.QueryRowContext(ctx, leaseAcquireSQL, lp.Name, lp.Holder, offset(lp.TTL)).
			Scan(&l.Token, &times[0], &times[1], &times[2])
		if err == nil {
			acquired = true
			return scanLeaseTimes(&l, times)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return mapErr(err)
		}
		// Held by someone else: say by whom, for the caller's message.
		l = dialect.LeaseInfo{Name: lp.Name}
		err = q.QueryRowContext(ctx, leaseGetSQL, lp.Name).Scan(&l.Holder, &l.Token, &times[0], &times[1], &times[2])
		if err != nil {
			return fmt.Errorf("read holder: %w", mapErr(err))
		}
		return scanLeaseTimes(&l, times)
	})
	if err != nil {
		return l, false, fmt.Errorf("acquire lease %q: %w", lp.Name, err)
	}
	return l, acquired, nil
}

// In: name, holder, token, ttl offset. Out: acquired_at, expires_at, now; no
// row when the lease was lost or has expired.
const leaseExtendSQL = `
UPDATE stageq_exclusive_leases
   SET expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?4), updated_at = ` + nowSQL + `
 WHERE name = ?1 AND holder = ?2 AND token = ?3 AND expires_at > ` + nowSQL + `
RETURNING acquired_at, expires_at, ` + nowSQL

// LeaseExtend implements dialect.Scheduler.
func (s *SQLite) LeaseExtend(ctx context.Context, lp dialect.LeaseExtendParams) (dialect.LeaseInfo, error) {
	l := dialect.LeaseInfo{Name: lp.Name, Holder: lp.Holder, Token: lp.Token}
	err := s.inTx(ctx, nil, func(q dialect.Querier) error {
		var times [3]string
		if err := q.QueryRowContext(ctx, leaseExtendSQL, lp.Name, lp.Holder, lp.Token, offset(lp.TTL)).
			Scan(&times[0], &times[1], &times[2]); err != nil {
			return err
		}
		return scanLeaseTimes(&l, times)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return l, fmt.Errorf("extend lease %q (token %d): %w", lp.Name, lp.Token, dialect.ErrLeaseLost)
	}
	if err != nil {
		return l, fmt.Errorf("extend lease %q: %w", lp.Name, mapErr(err))
	}
	return l, nil
}

// leaseReleaseSQL frees a lease, fenced by holder and token; the row stays so the
// next holder's token is higher. In: name, holder, token.
const leaseReleaseSQL = `
UPDATE stageq_exclusive_leases
   SET holder = NULL, expires_at = min(expires_at, ` + nowSQL + `), updated_at = ` + nowSQL + `
 WHERE name = ? AND holder = ? AND token = ?`

// LeaseRelease implements dialect.Scheduler.
func (s *SQLite) LeaseRelease(ctx context.Context, lp dialect.LeaseReleaseParams) error {
	var n int64
	err := s.inTx(ctx, nil, func(q dialect.Querier) error {
		res, err := q.ExecContext(ctx, leaseReleaseSQL, lp.Name, lp.Holder, lp.Token)
		if err != nil {
			return mapErr(err)
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("release lease %q: %w", lp.Name, err)
	}
	if n != 1 {
		return fmt.Errorf("release lease %q (token %d): %w", lp.Name, lp.Token, dialect.ErrLeaseLost)
	}
	return nil
}

// In: name (empty for all), held only. Out: leases by name.
const leaseListSQL = `
SELECT name, coalesce(holder, ''), token, acquired_at, expires_at, ` + nowSQL + `
  FROM stageq_exclusive_leases
 WHERE (?1 = '' OR name = ?1)
   AND (NOT ?2 OR (holder IS NOT NULL AND expires_at > ` + nowSQL + `))
 ORDER BY name`

// LeaseList implements dialect.Scheduler.
func (s *SQLite) LeaseList(ctx context.Context, f dialect.LeaseFilter) ([]dialect.LeaseInfo, error) {
	rows, err := s.pool().QueryContext(ctx, leaseListSQL, f.Name, f.HeldOnly)
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", mapErr(err))
	}
	defer rows.Close()
	var out []dialect.LeaseInfo
	for rows.Next() {
		var l dialect.LeaseInfo
		var times [3]string
		if err := rows.Scan(&l.Name, &l.Holder, &l.Token, &times[0], &times[1], &times[2]); err != nil {
			return nil, fmt.Errorf("list leases: %w", err)
		}
		if err := scanLeaseTimes(&l, times); err != nil {
			return nil, fmt.Errorf("list leases: %w", err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list leases: %w", mapErr(err))
	}
	return out, nil
}

// scanLeaseTimes parses acquired_at, expires_at and now, in that order.
func scanLeaseTimes(l *dialect.LeaseInfo, times [3]string) error {
	var err error
	if l.AcquiredAt, err = parseTime(times[0]); err != nil {
		return err
	}
	if l.ExpiresAt, err = parseTime(times[1]); err != nil {
		return err
	}
	l.Now, err = parseTime(times[2])
	return err
}
