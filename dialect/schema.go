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
// tables, its routines (installed apart, see Routines), and how golang-migrate reaches its database. Each
// dialect owns them (its folder under migrations/, served by the dialect's
// package), so the migrations package knows no dialect by name.
type Schema struct {
	// Files holds the migrations, 000001_core.up.sql and on.
	Files fs.FS
	// Driver prepares db for golang-migrate (creates the namespace its version
	// table lives in) and opens golang-migrate's driver on a connection pool
	// of its own to the same database, which the driver's Close closes:
	// golang-migrate's drivers close the pool they are given, and pgx's keeps
	// one of its connections for as long as it is open.
	Driver func(ctx context.Context, db *sql.DB) (database.Driver, error)
	// Version reads the version the database's schema is at, and whether a
	// migration failed half way; 0 when stageq's schema was never applied.
	Version func(ctx context.Context, db *sql.DB) (version uint, dirty bool, err error)
	// Floor reads the oldest schema version a binary may expect and still run
	// on this database: a migration that only adds (a column with a default, a
	// table, an index) leaves it where it was, so workers of the previous
	// version keep running and restarting during a rolling upgrade; one that
	// takes away raises it. 0 when the database records none (before version 13).
	Floor func(ctx context.Context, db *sql.DB) (uint, error)
	// Routines is the logic the dialect keeps in the database, versioned apart
	// from the tables; nil for a dialect that keeps it in Go (SQLite).
	Routines *Routines
}

// ReadFloor reads the one floor row from a dialect's query; no row, or no
// table yet (checked by the caller), is 0.
func ReadFloor(row *sql.Row) (uint, error) {
	var v int64
	if err := row.Scan(&v); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, nil
		}
		return 0, fmt.Errorf("read schema floor: %w", err)
	}
	if v < 0 {
		// As a uint it would be huge, and admit no binary at all with a
		// message that says nothing of the cause.
		return 0, fmt.Errorf("read schema floor: the database records %d; a floor is a schema version, 0 or more", v)
	}
	return uint(v), nil
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
