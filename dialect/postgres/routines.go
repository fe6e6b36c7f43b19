package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/stageq/stageq/dialect"
	rsrc "github.com/stageq/stageq/routines/postgres"
)

// Routines are the PL/pgSQL functions in routines/postgres, version
// rsrc.Version, installed into schema stageq_r<version> (package routines).
func Routines() dialect.Routines {
	return dialect.Routines{Version: rsrc.Version, Files: rsrc.Files, SQL: routineSQL}
}

// routineSQL installs a version in one transaction. DDL is transactional in
// PostgreSQL, so a failed install leaves nothing behind. Function bodies are
// not checked while they are created (as pg_dump restores them): the files
// may then name each other in any order; every function is compiled, and
// checked, on its first call.
var routineSQL = dialect.RoutineSQL{
	Lock:       `SELECT pg_advisory_xact_lock(hashtextextended('stageq: routines', 0))`,
	LockShared: `SELECT pg_advisory_xact_lock_shared(hashtextextended('stageq: routines', 0))`,
	Prepare:    []string{`SET LOCAL check_function_bodies = off`},
	CreateNamespace: func(ctx context.Context, tx *sql.Tx, ns string) error {
		if _, err := tx.ExecContext(ctx, `CREATE SCHEMA `+ns); err != nil {
			return fmt.Errorf("create schema %s: %w", ns, err)
		}
		// A role that may use schema stageq (a worker's, an application's
		// calling stageq.enqueue) may use the routines' schema too: the
		// functions run with the caller's rights, as they did in stageq.
		if err := copyUsage(ctx, tx, ns); err != nil {
			return fmt.Errorf("grant usage on %s: %w", ns, err)
		}
		return nil
	},
	DropNamespace: func(ctx context.Context, tx *sql.Tx, ns string) error {
		if _, err := tx.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+ns+` CASCADE`); err != nil {
			return fmt.Errorf("drop schema %s: %w", ns, err)
		}
		return nil
	},
	Arg:    func(_ string, v any) any { return v },
	List:   `SELECT version, checksum, installed_at FROM stageq.routines ORDER BY version DESC`,
	Record: `INSERT INTO stageq.routines (version, checksum) VALUES ($1, $2)`,
	Forget: `DELETE FROM stageq.routines WHERE version = $1`,
	InUse: `
SELECT routines, count(*) FROM stageq.workers
 WHERE routines IS NOT NULL AND stopped_at IS NULL
   AND heartbeat_at >= now() - $1::bigint * interval '1 millisecond'
 GROUP BY routines`,
}

// usageGrantsSQL writes, for schema $1, the GRANT USAGE of every role that
// has USAGE on schema stageq (PUBLIC included), its owner aside.
const usageGrantsSQL = `
SELECT format('GRANT USAGE ON SCHEMA %I TO %s', $1::text,
              CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END)
  FROM pg_namespace n
 CROSS JOIN LATERAL aclexplode(n.nspacl) a
  LEFT JOIN pg_roles r ON r.oid = a.grantee
 WHERE n.nspname = 'stageq' AND a.privilege_type = 'USAGE' AND a.grantee <> n.nspowner`

// copyUsage gives schema ns the USAGE grants of schema stageq.
func copyUsage(ctx context.Context, tx *sql.Tx, ns string) error {
	grants, err := dialect.QueryAll(ctx, tx, mapErr, usageGrantsSQL, func(r *sql.Rows, g *string) error { return r.Scan(g) }, ns)
	if err != nil {
		return err
	}
	for _, g := range grants {
		if _, err := tx.ExecContext(ctx, g); err != nil {
			return fmt.Errorf("%s: %w", g, err)
		}
	}
	return nil
}

// UseRelease implements dialect.ReleaseUser.
func (p *Postgres) UseRelease(rel dialect.Release) {
	p.migrations = rel.MigrationsOr(p.migrations)
	p.calls = newCalls(rel.RoutinesOr(p.calls.Routines()))
}

// newCalls renders the statements that call a routine for r's version.
func newCalls(r dialect.Routines) *dialect.RoutineCalls {
	return dialect.NewRoutineCalls(r, claimSQL, finishSQL, finishManySQL, advanceSQL, rescueSQL,
		bodySessionSQL, openStageSQL, configureSQL, submitSQL)
}
