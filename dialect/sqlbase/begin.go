package sqlbase

import (
	"context"
	"database/sql"
	"fmt"
)

// BeginTx implements dialect.Dialect's BeginTx for a dialect whose write
// transactions begin with db's defaults (PostgreSQL's; SQLite's BEGIN
// IMMEDIATE, which its DSN's _txlock sets): db's BeginTx, a failure mapped to
// stageq's sentinels by mapErr.
func BeginTx(ctx context.Context, db *sql.DB, mapErr func(error) error) (*sql.Tx, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", mapErr(err))
	}
	return tx, nil
}
