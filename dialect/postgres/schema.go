package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/golang-migrate/migrate/v4/database"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/stageq/stageq/dialect"
)

// migrationsTable is where golang-migrate records the schema version, inside
// stageq's own namespace so that it never collides with an application's own
// migrations.
const migrationsTable = `"stageq"."schema_migrations"`

// Schema implements dialect.Dialect.
func (p *Postgres) Schema() dialect.Schema {
	r := p.calls.Routines()
	return dialect.Schema{Files: p.migrations, Driver: p.migrationDriver, Version: schemaVersion, Floor: schemaFloor, Routines: &r}
}

func schemaFloor(ctx context.Context, db *sql.DB) (uint, error) {
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass('stageq.schema_floor') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, fmt.Errorf("read schema floor: %w", err)
	}
	if !exists {
		return 0, nil
	}
	return dialect.ReadFloor(db.QueryRowContext(ctx, `SELECT oldest_binary FROM stageq.schema_floor`))
}

// migrationDriver implements dialect.Schema.Driver.
func (p *Postgres) migrationDriver(ctx context.Context, db *sql.DB) (database.Driver, error) {
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS stageq`); err != nil {
		return nil, fmt.Errorf("create schema stageq: %w", err)
	}
	own := stdlib.OpenDB(*p.cfg)
	drv, err := pgxmigrate.WithInstance(own, &pgxmigrate.Config{
		MigrationsTable: migrationsTable, MigrationsTableQuoted: true,
	})
	if err != nil {
		own.Close()
		return nil, err
	}
	return drv, nil
}

func schemaVersion(ctx context.Context, db *sql.DB) (uint, bool, error) {
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass('stageq.schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, false, fmt.Errorf("read schema version: %w", err)
	}
	if !exists {
		return 0, false, nil
	}
	return dialect.ScanSchemaVersion(db.QueryRowContext(ctx, `SELECT version, dirty FROM stageq.schema_migrations LIMIT 1`))
}
