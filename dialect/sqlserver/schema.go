package sqlserver

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/golang-migrate/migrate/v4/database"
	sqlservermigrate "github.com/golang-migrate/migrate/v4/database/sqlserver"

	"github.com/stageq/stageq/dialect"
)

// migrationsTable is where golang-migrate records the schema version, in
// schema stageq so that it never collides with an application's own
// migrations.
const migrationsTable = "schema_migrations"

// createSchemaSQL creates schema stageq before golang-migrate's lock can be
// taken (its version table lives in the schema). Two migrators starting on an
// empty database would both see no schema and the second CREATE SCHEMA would fail
// (2714), so the check and the creation run under an exclusive application lock
// of their own, held until the transaction ends (sp_getapplock returns < 0 when
// the lock was not granted in time).
const createSchemaSQL = `
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

// Schema implements dialect.Dialect.
func (d *SQLServer) Schema() dialect.Schema {
	r := d.calls.Routines()
	return dialect.Schema{Files: d.migrations, Driver: d.migrationDriver, Version: schemaVersion, Floor: schemaFloor, Routines: &r}
}

// schemaFloorTableSQL finds the floor table (version 13 on); schemaFloorSQL
// reads its one row.
const (
	schemaFloorTableSQL = `SELECT OBJECT_ID(N'stageq.SchemaFloor', N'U')`
	schemaFloorSQL      = `SELECT TOP (1) oldest_binary FROM stageq.SchemaFloor`
)

func schemaFloor(ctx context.Context, db *sql.DB) (uint, error) {
	var id sql.NullInt64
	if err := db.QueryRowContext(ctx, schemaFloorTableSQL).Scan(&id); err != nil {
		return 0, fmt.Errorf("read schema floor: %w", err)
	}
	if !id.Valid {
		return 0, nil
	}
	return dialect.ReadFloor(db.QueryRowContext(ctx, schemaFloorSQL))
}

// migrationDriver implements dialect.Schema.Driver.
func (d *SQLServer) migrationDriver(ctx context.Context, db *sql.DB) (database.Driver, error) {
	if _, err := db.ExecContext(ctx, createSchemaSQL); err != nil {
		return nil, fmt.Errorf("create schema stageq: %w", err)
	}
	own := sql.OpenDB(d.connector)
	drv, err := sqlservermigrate.WithInstance(own, &sqlservermigrate.Config{
		SchemaName: "stageq", MigrationsTable: migrationsTable,
	})
	if err != nil {
		own.Close()
		return nil, err
	}
	return drv, nil
}

// schemaTableSQL finds golang-migrate's version table; schemaVersionSQL reads
// its one row.
const (
	schemaTableSQL   = `SELECT OBJECT_ID(N'stageq.schema_migrations', N'U')`
	schemaVersionSQL = `SELECT TOP (1) version, dirty FROM stageq.schema_migrations`
)

func schemaVersion(ctx context.Context, db *sql.DB) (uint, bool, error) {
	var id sql.NullInt64
	if err := db.QueryRowContext(ctx, schemaTableSQL).Scan(&id); err != nil {
		return 0, false, fmt.Errorf("read schema version: %w", err)
	}
	if !id.Valid {
		return 0, false, nil
	}
	return dialect.ScanSchemaVersion(db.QueryRowContext(ctx, schemaVersionSQL))
}
