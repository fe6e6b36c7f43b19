package postgres_test

import (
	"context"
	"testing"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/internal/dialecttest"
	"github.com/stageq/stageq/internal/pgtest"
)

// migratedDB creates and migrates a database for one test or benchmark and
// drops it after.
func migratedDB(b testing.TB) dialect.Dialect {
	b.Helper()
	d, _ := migratedDSN(b, "stageq_bench")
	return d
}

// migratedDSN is migratedDB for a test that also connects to the database by
// other means (a driver of its own, another role), so it needs the DSN too;
// prefix begins the database's name.
func migratedDSN(b testing.TB, prefix string) (dialect.Dialect, string) {
	b.Helper()
	dsn := pgtest.NewDatabase(b, prefix)
	d := dialecttest.Migrated(b, dsn)
	return d, dsn
}

// execSQL runs fixture SQL.
func execSQL(b testing.TB, d dialect.Dialect, q string, args ...any) {
	b.Helper()
	if _, err := d.DB().ExecContext(context.Background(), q, args...); err != nil {
		b.Fatalf("%s: %v", q, err)
	}
}

// analyzeOnce gathers table's statistics now and turns autovacuum off for it,
// so that no later analyze replaces them: what the test runs next is planned
// with what the table held at this point.
func analyzeOnce(tb testing.TB, d dialect.Dialect, table string) {
	tb.Helper()
	execSQL(tb, d, "ANALYZE "+table)
	execSQL(tb, d, "ALTER TABLE "+table+" SET (autovacuum_enabled = off)")
}

// claimN claims p.Max tasks and fails the test unless it gets exactly that
// many: what a test measures after its claim assumes them all running.
func claimN(tb testing.TB, d dialect.Dialect, p dialect.ClaimParams) []dialect.ClaimedTask {
	tb.Helper()
	got, err := d.TaskClaim(context.Background(), p)
	if err != nil || len(got) != p.Max {
		tb.Fatalf("claim: %d tasks, %v", len(got), err)
	}
	return got
}

// addRunnable adds n runnable processes with per tasks each, in bulk.
func addRunnable(b testing.TB, d dialect.Dialect, n, per int) {
	execSQL(b, d, `
INSERT INTO stageq.processes (name, current_order)
SELECT 'p' || g, 100 FROM generate_series(1, $1) g`, n)
	execSQL(b, d, `
INSERT INTO stageq.tasks (process_id, execution_order, body, state, run_at)
SELECT p.id, 100, 'SELECT 1', 'available', now() - interval '1 hour'
  FROM stageq.processes p, generate_series(1, $1) g
 WHERE p.name LIKE 'p%'`, per)
}
