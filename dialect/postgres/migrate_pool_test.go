package postgres

import (
	"context"
	"testing"

	"github.com/stageq/stageq/internal/pgtest"
	"github.com/stageq/stageq/migrations"
)

// TestMigrationsHoldNoConnection: golang-migrate runs on a pool of its own,
// closed when a step ends. On the caller's pool its pgx driver kept a
// connection for as long as it was open, and it was never closed (closing it
// would have closed the caller's pool): one connection lost per migrate, for
// a worker started with --migrate its whole life.
func TestMigrationsHoldNoConnection(t *testing.T) {
	ctx := context.Background()
	d, err := Open(ctx, pgtest.NewDatabase(t, "stageq_pool"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for range 3 {
		if _, err := migrations.Up(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.DB().ExecContext(ctx, `UPDATE stageq.schema_migrations SET dirty = true`); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Force(ctx, d, 15); err != nil {
		t.Fatal(err)
	}
	if err := d.DB().PingContext(ctx); err != nil {
		t.Fatalf("the caller's pool after the migrations: %v", err)
	}
	if n := d.DB().Stats().InUse; n != 0 {
		t.Errorf("after 3 ups and a force, %d of the caller's connections are in use, want 0", n)
	}
}
