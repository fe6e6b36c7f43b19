package dialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"

	"github.com/golang-migrate/migrate/v4/database"
)

// Schema is a dialect's own migrations: the files that install and upgrade its
// tables and routines, and how golang-migrate reaches its database. Each
// dialect owns them (its folder under migrations/, served by the dialect's
// package), so the migrations package knows no dialect by name.
type Schema struct {
	// Files holds the migrations, 000001_core.up.sql and on.
	Files fs.FS
	// Driver prepares db for golang-migrate (creates the namespace its version
	// table lives in) and opens golang-migrate's driver on it.
	Driver func(ctx context.Context, db *sql.DB) (database.Driver, error)
	// Version reads the version the database's schema is at, and whether a
	// migration failed half way; 0 when stageq's schema was never applied.
	Version func(ctx context.Context, db *sql.DB) (version uint, dirty bool, err error)
}

// ScanSchemaVersion reads golang-migrate's one version row (version, dirty)
// from a dialect's query; no row is version 0.
func ScanSchemaVersion(row *sql.Row) (uint, bool, error) {
	var v int64
	var dirty bool
	if err := row.Scan(&v, &dirty); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("read schema version: %w", err)
	}
	return uint(v), dirty, nil
}
