package sqlbase

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// list runs a read on the pool (repeated after errors a dialect's Retry calls
// transient: a read changes nothing) and scans every row; what names the read
// in the error ("list what: ...").
func list[T any](ctx context.Context, b *Base, what, stmt string, scan func(*sql.Rows, *T) error, args ...any) ([]T, error) {
	var out []T
	err := b.onPool(ctx, true, func(ctx context.Context) (err error) {
		out, err = dialect.QueryAll(ctx, b.Pool, b.MapErr, stmt, scan, args...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", what, err)
	}
	return out, nil
}

// deleteOnce runs a counting delete on the pool. It is repeated only after
// errors that roll it back: repeated after a lost answer, a delete that did
// happen would report its row not found.
func (b *Base) deleteOnce(ctx context.Context, stmt string, args ...any) (int64, error) {
	var n int64
	err := b.onPool(ctx, false, func(ctx context.Context) (err error) {
		n, err = b.execCount(ctx, b.Pool, stmt, args...)
		return err
	})
	return n, err
}
