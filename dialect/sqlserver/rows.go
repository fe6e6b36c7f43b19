package sqlserver

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// retryOn runs f on the pool with retry's backoff, or once when the caller gave
// a transaction: SQL Server has already rolled a deadlock victim's transaction
// back (per its documentation; not run here), and only the caller can start it
// again.
func (d *SQLServer) retryOn(ctx context.Context, tx *sql.Tx, mode retryMode, f func(ctx context.Context) error) error {
	if tx != nil {
		return f(ctx)
	}
	return d.retry(ctx, mode, f)
}

// queryAll runs stmt on the pool, retried as mode allows, and reads every row
// with scan (a retry starts the list again). Errors are mapped (mapErr).
func queryAll[T any](ctx context.Context, d *SQLServer, mode retryMode, stmt string, scan func(r *sql.Rows, v *T) error, args ...any) ([]T, error) {
	var out []T
	err := d.retry(ctx, mode, func(ctx context.Context) error {
		var err error
		// The driver's error as it came, for retry to classify.
		out, err = dialect.QueryAll(ctx, d.db, dialect.KeepErr, stmt, scan, args...)
		return err
	})
	if err != nil {
		return nil, mapErr(err)
	}
	return out, nil
}

// listAll runs stmt as queryAll does, retried after any transient error (a list
// changes nothing), and names the list in its error.
func listAll[T any](ctx context.Context, d *SQLServer, what, stmt string, scan func(r *sql.Rows, v *T) error, args ...any) ([]T, error) {
	out, err := queryAll(ctx, d, retryAll, stmt, scan, args...)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", what, err)
	}
	return out, nil
}

// exec runs stmt on the pool, retried as mode allows, for its effect only.
// Errors are mapped (mapErr).
func (d *SQLServer) exec(ctx context.Context, mode retryMode, stmt string, args ...any) error {
	err := d.retry(ctx, mode, func(ctx context.Context) error {
		_, err := d.db.ExecContext(ctx, stmt, args...)
		return err
	})
	if err != nil {
		return mapErr(err)
	}
	return nil
}

// queryCount runs stmt on the pool, retried as mode allows, and returns the
// count its one row answers (rows changed, deleted or rescued). Errors are
// mapped (mapErr).
func (d *SQLServer) queryCount(ctx context.Context, mode retryMode, stmt string, args ...any) (int, error) {
	var n int
	err := d.retry(ctx, mode, func(ctx context.Context) error {
		return d.db.QueryRowContext(ctx, stmt, args...).Scan(&n)
	})
	if err != nil {
		return 0, mapErr(err)
	}
	return n, nil
}
