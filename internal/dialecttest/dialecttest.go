// Package dialecttest opens migrated queue databases for the tests of the
// dialect packages, which package queue (and so queuetest) builds on and
// cannot serve.
package dialecttest

import (
	"context"
	"testing"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/migrations"
)

// Migrated opens dsn with the dialect its scheme names (the calling test links
// that dialect's package, which registers it), applies the schema, and closes
// the dialect when the test ends. Either failing fails the test.
func Migrated(tb testing.TB, dsn string) dialect.Dialect {
	tb.Helper()
	ctx := context.Background()
	d, err := dialect.Open(ctx, dsn)
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(func() { d.Close() })
	if _, err := migrations.Up(ctx, d); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	return d
}
