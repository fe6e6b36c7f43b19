package postgres

import "github.com/stageq/stageq/dialect/sqlbase"

// leaseSQL are the exclusive-lease statements sqlbase runs (base.go).
var leaseSQL = sqlbase.LeaseStatements{
	// Acquire takes lease $1 for holder $2 for $3 ms in one statement: it
	// inserts a new lease (token 1), takes over a released or expired one (token+1:
	// the fence every earlier holder's writes are checked against), or re-acquires
	// the holder's own live lease (same token: reentrant). Every SET expression sees
	// the row as it was, so the CASEs compare the old holder and expiry. When another
	// holder has a live lease the WHERE refuses the update and no row comes back.
	// Out: token, acquired_at, expires_at, now.
	Acquire: `
INSERT INTO stageq.exclusive_leases AS l (name, holder, token, acquired_at, expires_at)
VALUES ($1, $2, 1, now(), now() + $3 * interval '1 millisecond')
ON CONFLICT (name) DO UPDATE
   SET token = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > now() THEN l.token ELSE l.token + 1 END,
       acquired_at = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > now() THEN l.acquired_at ELSE now() END,
       holder = EXCLUDED.holder,
       expires_at = EXCLUDED.expires_at,
       updated_at = now()
 WHERE l.holder IS NULL OR l.expires_at <= now() OR l.holder = EXCLUDED.holder
RETURNING token, acquired_at, expires_at, now()`,

	// Get reads one lease. In: name. Out: holder, token, acquired, expires, now.
	Get: `
SELECT coalesce(holder, ''), token, acquired_at, expires_at, now() FROM stageq.exclusive_leases WHERE name = $1`,

	// Extend pushes the expiry of a live lease held with the token. In: name,
	// holder, token, ttl ms. Out: acquired_at, expires_at, now; no row when lost.
	Extend: `
UPDATE stageq.exclusive_leases
   SET expires_at = now() + $4 * interval '1 millisecond', updated_at = now()
 WHERE name = $1 AND holder = $2 AND token = $3 AND expires_at > now()
RETURNING acquired_at, expires_at, now()`,

	// Release frees a lease, fenced by holder and token; the row stays so the
	// next holder's token is higher. In: name, holder, token.
	Release: `
UPDATE stageq.exclusive_leases
   SET holder = NULL, expires_at = least(expires_at, now()), updated_at = now()
 WHERE name = $1 AND holder = $2 AND token = $3`,

	// In: name (empty for all), held only. Out: leases by name.
	List: `
SELECT name, coalesce(holder, ''), token, acquired_at, expires_at, now()
  FROM stageq.exclusive_leases
 WHERE ($1 = '' OR name = $1)
   AND (NOT $2 OR (holder IS NOT NULL AND expires_at > now()))
 ORDER BY name`,
}
