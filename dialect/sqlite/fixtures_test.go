package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/internal/dialecttest"
)

// migrated opens a new SQLite queue database with the schema applied.
func migrated(t testing.TB) dialect.Dialect {
	t.Helper()
	d, _ := migratedFile(t)
	return d
}

// migratedFile is migrated, and also names the database's file.
func migratedFile(t testing.TB) (dialect.Dialect, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "queue.db")
	d := dialecttest.Migrated(t, "sqlite://"+path)
	return d, path
}

// analyzedLogs writes one Logs row for each of tasks 1 to n (first attempt,
// the task's id as its lease token) and then runs ANALYZE on db: the
// statistics of a young database, taken while Logs was that small, which
// nothing refreshes as Logs grows.
func analyzedLogs(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	ctx := context.Background()
	for id := 1; id <= n; id++ {
		if _, err := db.ExecContext(ctx, `
INSERT INTO stageq_logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt, lease_token)
VALUES (?1, 1, 'p', 100, 'sql', 'SELECT 1', 'w', 1, ?1)`, id); err != nil {
			t.Fatalf("Logs row of task %d: %v", id, err)
		}
	}
	if _, err := db.ExecContext(ctx, "ANALYZE"); err != nil {
		t.Fatalf("ANALYZE: %v", err)
	}
}
