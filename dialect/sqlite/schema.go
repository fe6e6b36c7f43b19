package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/golang-migrate/migrate/v4/database"
	sqlitemigrate "github.com/golang-migrate/migrate/v4/database/sqlite"

	"github.com/stageq/stageq/dialect"
	schema "github.com/stageq/stageq/migrations/sqlite"
)

// migrationsTable is where golang-migrate records the schema version, named
// so that it never collides with an application's own migrations.
const migrationsTable = "stageq_schema_migrations"

// Schema implements dialect.Dialect.
func (s *SQLite) Schema() dialect.Schema {
	return dialect.Schema{Files: schema.Files, Driver: migrationDriver, Version: schemaVersion}
}

func migrationDriver(_ context.Context, db *sql.DB) (database.Driver, error) {
	return sqlitemigrate.WithInstance(db, &sqlitemigrate.Config{MigrationsTable: migrationsTable})
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
