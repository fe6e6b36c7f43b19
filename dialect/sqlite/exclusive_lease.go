package sqlite

import "github.com/stageq/stageq/dialect/sqlbase"

// Every lease statement runs in a BEGIN IMMEDIATE transaction (inTx): an
// autocommit statement that reads, then writes, can fail to upgrade its snapshot
// when another process wrote in between; holding the write lock from the start
// makes it wait its turn instead.

// leaseSQL are the exclusive-lease statements sqlbase runs (base.go).
var leaseSQL = sqlbase.LeaseStatements{
	// Acquire takes lease ?1 for holder ?2 until now + ?3 in one statement:
	// it inserts a new lease (token 1), takes over a released or expired one (token+1:
	// the fence every earlier holder's writes are checked against), or re-acquires
	// the holder's own live lease (same token: reentrant). SET expressions see the
	// old row, so the CASEs compare the old holder and expiry; 'now' is the same
	// for the whole statement. No row comes back when another holder has it.
	// Out: token, acquired_at, expires_at, now.
	Acquire: `
INSERT INTO stageq_exclusive_leases (name, holder, token, acquired_at, expires_at)
VALUES (?1, ?2, 1, ` + nowSQL + `, strftime('%Y-%m-%d %H:%M:%f', 'now', ?3))
ON CONFLICT (name) DO UPDATE
   SET token = CASE WHEN holder = excluded.holder AND expires_at > ` + nowSQL + ` THEN token ELSE token + 1 END,
       acquired_at = CASE WHEN holder = excluded.holder AND expires_at > ` + nowSQL + ` THEN acquired_at ELSE excluded.acquired_at END,
       holder = excluded.holder,
       expires_at = excluded.expires_at,
       updated_at = ` + nowSQL + `
 WHERE holder IS NULL OR expires_at <= ` + nowSQL + ` OR holder = excluded.holder
RETURNING token, acquired_at, expires_at, ` + nowSQL,

	// In: name. Out: holder, token, acquired, expires, now.
	Get: `
SELECT coalesce(holder, ''), token, acquired_at, expires_at, ` + nowSQL + ` FROM stageq_exclusive_leases WHERE name = ?`,

	// In: name, holder, token, ttl offset. Out: acquired_at, expires_at, now; no
	// row when the lease was lost or has expired.
	Extend: `
UPDATE stageq_exclusive_leases
   SET expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?4), updated_at = ` + nowSQL + `
 WHERE name = ?1 AND holder = ?2 AND token = ?3 AND expires_at > ` + nowSQL + `
RETURNING acquired_at, expires_at, ` + nowSQL,

	// Release frees a lease, fenced by holder and token; the row stays so the
	// next holder's token is higher. In: name, holder, token.
	Release: `
UPDATE stageq_exclusive_leases
   SET holder = NULL, expires_at = min(expires_at, ` + nowSQL + `), updated_at = ` + nowSQL + `
 WHERE name = ? AND holder = ? AND token = ?`,

	// In: name (empty for all), held only. Out: leases by name.
	List: `
SELECT name, coalesce(holder, ''), token, acquired_at, expires_at, ` + nowSQL + `
  FROM stageq_exclusive_leases
 WHERE (?1 = '' OR name = ?1)
   AND (NOT ?2 OR (holder IS NOT NULL AND expires_at > ` + nowSQL + `))
 ORDER BY name`,
}
