package dialect

import (
	"context"
	"database/sql"
	"time"
)

// QueryAll runs stmt on q and reads every row with scan, which fills in one value
// from the current row. The caller wraps the error with what it was doing; driver
// errors of the query go through mapErr first.
func QueryAll[T any](ctx context.Context, q Querier, mapErr func(error) error, stmt string, scan func(r *sql.Rows, v *T) error, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	return ScanAll(rows, scan)
}

// ScanAll reads every row of rows with scan and closes rows.
func ScanAll[T any](rows *sql.Rows, scan func(r *sql.Rows, v *T) error) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Ptr is the scanned time, or nil where the column was NULL.
func (t TimeScan) Ptr() *time.Time {
	if t.Time.IsZero() {
		return nil
	}
	return &t.Time
}
