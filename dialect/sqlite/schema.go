package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/golang-migrate/migrate/v4/database"
	sqlitemigrate "github.com/golang-migrate/migrate/v4/database/sqlite"

	"github.com/stageq/stageq/dialect"
)

// migrationsTable is where golang-migrate records the schema version, named
// so that it never collides with an application's own migrations.
const migrationsTable = "stageq_schema_migrations"

// Schema implements dialect.Dialect.
func (s *SQLite) Schema() dialect.Schema {
	return dialect.Schema{Files: s.migrations, Driver: s.migrationDriver, Version: schemaVersion, Floor: schemaFloor}
}

func schemaFloor(ctx context.Context, db *sql.DB) (uint, error) {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'stageq_schema_floor'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("read schema floor: %w", err)
	}
	if n == 0 {
		return 0, nil
	}
	return dialect.ReadFloor(db.QueryRowContext(ctx, `SELECT oldest_binary FROM stageq_schema_floor`))
}

// migrationDriver implements dialect.Schema.Driver.
func (s *SQLite) migrationDriver(context.Context, *sql.DB) (database.Driver, error) {
	own, err := sql.Open("sqlite", s.dsn)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", s.path, err)
	}
	drv, err := sqlitemigrate.WithInstance(own, &sqlitemigrate.Config{MigrationsTable: migrationsTable})
	if err != nil {
		own.Close()
		return nil, err
	}
	return drv, nil
}

func schemaVersion(ctx context.Context, db *sql.DB) (uint, bool, error) {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, migrationsTable).Scan(&n); err != nil {
		return 0, false, fmt.Errorf("read schema version: %w", err)
	}
	if n == 0 {
		return 0, false, nil
	}
	return dialect.ScanSchemaVersion(db.QueryRowContext(ctx, `SELECT version, dirty FROM `+migrationsTable+` LIMIT 1`))
}

// UseRelease implements dialect.ReleaseUser (SQLite keeps no routines).
func (s *SQLite) UseRelease(rel dialect.Release) { s.migrations = rel.MigrationsOr(s.migrations) }
