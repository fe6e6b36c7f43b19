package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"

	"github.com/stageq/stageq/migrations"
)

// TestDownTo12NeedsVersion12Logic: migrations 1 to 12 of this release create
// tables only, so a database this release created has none of the functions a
// version-12 binary calls. Migration 13's down refuses there, before it
// changes a table; on a database that came up from version 12 (its functions
// still in schema stageq, here one stand-in) it goes down. SQLite keeps its
// logic in the binary: nothing to refuse.
func TestDownTo12NeedsVersion12Logic(t *testing.T) {
	forEachDialectBut(t, "sqlite", "SQLite keeps its logic in the binary: any schema version's tables are all a binary needs", func(t *testing.T, db *testDB) {
		ctx := context.Background()
		m, err := migrations.Migrator(ctx, db.D)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		// Down to 13 first, through the later versions' down files.
		if err := m.Migrate(13); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			t.Fatalf("down to 13: %v", err)
		}
		if v, _, err := m.Version(); err != nil || v != 13 {
			t.Fatalf("version %d, %v: this test is about migration 13's down", v, err)
		}

		// The refusal itself, by the server's message (golang-migrate's error
		// also quotes the file, which holds the same words).
		err = m.Steps(-1)
		var dbErr database.Error
		if !errors.As(err, &dbErr) || !strings.HasPrefix(dbErr.Err, "migration failed: stageq: schema version 13 cannot be migrated down to 12") {
			t.Fatalf("down from 13 on a database without version-12 logic: %v, want the refusal", err)
		}
		if n := db.count(t, "SELECT count(*) FROM "+routinesTable(db)); n == 0 {
			t.Fatalf("the refused down emptied or dropped %s", routinesTable(db))
		}
		// golang-migrate records the target, dirty, before it runs a file;
		// the message says to force the version back.
		if v, dirty, err := m.Version(); err != nil || v != 12 || !dirty {
			t.Fatalf("after the refusal: version %d dirty %v, %v; want 12, dirty", v, dirty, err)
		}
		if !strings.Contains(dbErr.Err, "force 13") {
			t.Errorf("the refusal does not say how to undo golang-migrate's dirty mark: %s", dbErr.Err)
		}

		// As after a version-12 database's upgrade: its claim is still there.
		db.exec(t, map[string]string{
			"postgres":  `CREATE FUNCTION stageq.claim() RETURNS int LANGUAGE sql AS 'SELECT 12'`,
			"sqlserver": `CREATE PROCEDURE stageq.Claim AS SELECT 12`,
		}[db.Dialect])
		if err := m.Force(13); err != nil {
			t.Fatal(err)
		}
		if err := m.Steps(-1); err != nil {
			t.Fatalf("down from 13 with version-12 logic present: %v", err)
		}
		if v, dirty, err := m.Version(); err != nil || v != 12 || dirty {
			t.Fatalf("after the down: version %d dirty %v, %v; want 12, clean", v, dirty, err)
		}
	})
}
