// Package migrations holds stageq's schema for every dialect, embedded in the
// binaries, and applies it with golang-migrate.
//
// Each dialect has a folder with the same version numbers (000001_core.up.sql, …).
// A binary knows the newest version it embeds (Expected) and refuses to run on a
// database whose schema is older, newer or dirty: see Check.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	sqlitemigrate "github.com/golang-migrate/migrate/v4/database/sqlite"
	sqlservermigrate "github.com/golang-migrate/migrate/v4/database/sqlserver"
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

//go:embed postgres/*.sql sqlite/*.sql sqlserver/*.sql
var files embed.FS

// Table is where golang-migrate records the schema version, inside stageq's own
// namespace so that it never collides with an application's own migrations.
const (
	TablePostgres  = `"stageq"."schema_migrations"`
	TableSQLite    = "stageq_schema_migrations"
	TableSQLServer = "schema_migrations" // in schema stageq
)

// ErrSchemaMismatch means the database's schema is not the one this binary expects.
var ErrSchemaMismatch = errors.New("schema version mismatch")

// ErrNewer means the database's schema is newer than this binary (it wraps
// ErrSchemaMismatch): upgrade the binary; migrating cannot help.
var ErrNewer = fmt.Errorf("%w: the database's schema is newer than this binary", ErrSchemaMismatch)

// FS returns the migration files of one dialect.
func FS(dialect string) (fs.FS, error) {
	sub, err := fs.Sub(files, dialect)
	if err != nil {
		return nil, fmt.Errorf("migrations for %s: %w", dialect, err)
	}
	return sub, nil
}

// Versions lists the versions a dialect's folder holds, ascending.
func Versions(dialect string) ([]uint, error) {
	entries, err := fs.ReadDir(files, dialect)
	if err != nil {
		return nil, fmt.Errorf("migrations for %s: %w", dialect, err)
	}
	seen := map[uint]bool{}
	for _, e := range entries {
		num, _, ok := strings.Cut(path.Base(e.Name()), "_")
		if !ok {
			continue
		}
		v, err := strconv.ParseUint(num, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("migration file %s/%s: version is not a number", dialect, e.Name())
		}
		seen[uint(v)] = true
	}
	out := make([]uint, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// Expected is the newest schema version this binary embeds for a dialect.
func Expected(dialect string) (uint, error) {
	vs, err := Versions(dialect)
	if err != nil {
		return 0, err
	}
	if len(vs) == 0 {
		return 0, fmt.Errorf("migrations for %s: none embedded", dialect)
	}
	return vs[len(vs)-1], nil
}

// sqlServerCreateSchema creates schema stageq before golang-migrate's lock can be
// taken (its version table lives in the schema). Two migrators starting on an
// empty database would both see no schema and the second CREATE SCHEMA would fail
// (2714), so the check and the creation run under an exclusive application lock
// of their own, held until the transaction ends (sp_getapplock returns < 0 when
// the lock was not granted in time).
const sqlServerCreateSchema = `
SET XACT_ABORT ON;
BEGIN TRANSACTION;
DECLARE @Lock int;
EXEC @Lock = sys.sp_getapplock @Resource = N'stageq: create schema', @LockMode = N'Exclusive',
     @LockOwner = N'Transaction', @LockTimeout = 60000;
IF @Lock < 0
    THROW 50090, N'stageq: could not take the schema-creation lock within 60 s', 1;
IF SCHEMA_ID(N'stageq') IS NULL
    EXEC (N'CREATE SCHEMA stageq');
COMMIT TRANSACTION;`

func newMigrate(ctx context.Context, dialect string, db *sql.DB) (*migrate.Migrate, error) {
	var (
		drv database.Driver
		err error
	)
	switch dialect {
	case "postgres":
		if _, err = db.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS stageq`); err != nil {
			return nil, fmt.Errorf("create schema stageq: %w", err)
		}
		drv, err = pgxmigrate.WithInstance(db, &pgxmigrate.Config{
			MigrationsTable: TablePostgres, MigrationsTableQuoted: true,
		})
	case "sqlite":
		drv, err = sqlitemigrate.WithInstance(db, &sqlitemigrate.Config{MigrationsTable: TableSQLite})
	case "sqlserver":
		if _, err = db.ExecContext(ctx, sqlServerCreateSchema); err != nil {
			return nil, fmt.Errorf("create schema stageq: %w", err)
		}
		drv, err = sqlservermigrate.WithInstance(db, &sqlservermigrate.Config{
			SchemaName: "stageq", MigrationsTable: TableSQLServer,
		})
	default:
		return nil, fmt.Errorf("migrations: unknown dialect %q", dialect)
	}
	if err != nil {
		return nil, fmt.Errorf("migrations: open %s driver: %w", dialect, err)
	}
	src, err := FS(dialect)
	if err != nil {
		return nil, err
	}
	source, err := iofs.New(src, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: read embedded files: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", source, dialect, drv)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return m, nil
}

// Up applies every migration the database lacks. Already being current is success.
// It returns the version the database is at afterwards.
func Up(ctx context.Context, dialect string, db *sql.DB) (uint, error) {
	m, err := newMigrate(ctx, dialect, db)
	if err != nil {
		return 0, err
	}
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return 0, fmt.Errorf("migrate up: %w", err)
	}
	v, dirty, err := m.Version()
	if err != nil {
		return 0, fmt.Errorf("migrate: read version: %w", err)
	}
	if dirty {
		return v, fmt.Errorf("migrate: version %d is dirty: a migration failed half way; fix the database, then force the version", v)
	}
	return v, nil
}

// Version reads the schema version the database is at; 0 when stageq's schema
// was never applied.
func Version(ctx context.Context, dialect string, db *sql.DB) (version uint, dirty bool, err error) {
	var q string
	switch dialect {
	case "postgres":
		q = `SELECT version, dirty FROM stageq.schema_migrations LIMIT 1`
		var exists bool
		if err := db.QueryRowContext(ctx, `SELECT to_regclass('stageq.schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
			return 0, false, fmt.Errorf("read schema version: %w", err)
		}
		if !exists {
			return 0, false, nil
		}
	case "sqlite":
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, TableSQLite).Scan(&n); err != nil {
			return 0, false, fmt.Errorf("read schema version: %w", err)
		}
		if n == 0 {
			return 0, false, nil
		}
		q = `SELECT version, dirty FROM ` + TableSQLite + ` LIMIT 1`
	case "sqlserver":
		var id sql.NullInt64
		if err := db.QueryRowContext(ctx, `SELECT OBJECT_ID(N'stageq.schema_migrations', N'U')`).Scan(&id); err != nil {
			return 0, false, fmt.Errorf("read schema version: %w", err)
		}
		if !id.Valid {
			return 0, false, nil
		}
		q = `SELECT TOP (1) version, dirty FROM stageq.schema_migrations`
	default:
		return 0, false, fmt.Errorf("migrations: unknown dialect %q", dialect)
	}
	var v int64
	if err := db.QueryRowContext(ctx, q).Scan(&v, &dirty); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("read schema version: %w", err)
	}
	return uint(v), dirty, nil
}

// Check refuses a database whose schema this binary does not know: never migrated,
// older, newer, or dirty. The error says what was found and what is expected.
func Check(ctx context.Context, dialect string, db *sql.DB) error {
	want, err := Expected(dialect)
	if err != nil {
		return err
	}
	got, dirty, err := Version(ctx, dialect, db)
	if err != nil {
		return err
	}
	switch {
	case dirty:
		return fmt.Errorf("%w: the database's schema version %d is dirty (a migration failed half way); this binary expects %d", ErrSchemaMismatch, got, want)
	case got == 0:
		return fmt.Errorf("%w: the database has no stageq schema; this binary expects version %d: run `queuectl migrate up` or `worker --migrate`", ErrSchemaMismatch, want)
	case got < want:
		return fmt.Errorf("%w: the database's schema is version %d; this binary expects %d: run `queuectl migrate up` or `worker --migrate`", ErrSchemaMismatch, got, want)
	case got > want:
		return fmt.Errorf("%w: version %d, and this binary knows up to %d: upgrade the binary", ErrNewer, got, want)
	}
	return nil
}
