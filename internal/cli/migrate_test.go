package cli

import (
	"context"
	"strings"
	"testing"
)

// TestMigrateDownAndForce: an operator goes down two versions and up again
// with queuectl alone, and repairs a dirty version the way the refusal says:
// on PostgreSQL migration 13's down refuses (this database never had version
// 12's functions); on SQLite migration 15 fails half way on a table in its
// path. Each leaves golang-migrate's record dirty, every command refuses the
// database naming `queuectl migrate force`, and force then up bring it back
// into service.
func TestMigrateDownAndForce(t *testing.T) {
	qcDatabases(t, func(t *testing.T, dsn string) {
		sqlite := strings.HasPrefix(dsn, "sqlite")
		qcExpect(t, dsn, 0, "", "enqueue", "SELECT 1")

		// Targets refused before anything changes (exit 2).
		qcExpect(t, dsn, 2, "a whole number from 1", "migrate", "force", "0")
		qcExpect(t, dsn, 2, "a whole number from 1", "migrate", "down", "x")
		qcExpect(t, dsn, 2, "versions 1 to 15, not 99", "migrate", "force", "99")
		qcExpect(t, dsn, 2, "down goes to an older version, not 15", "migrate", "down", "15")

		// Down and up again; the task survives both.
		qcExpect(t, dsn, 0, "schema is at version 13", "migrate", "down", "13")
		if out := qcExpect(t, dsn, 1, "this binary expects 15", "migrate", "version"); !strings.Contains(out, "database: 13\n") {
			t.Errorf("version after down: %q", out)
		}
		qcExpect(t, dsn, 1, "run `queuectl migrate up`", "tasks")
		qcExpect(t, dsn, 0, "schema is at version 15", "migrate", "up")
		if out := qcExpect(t, dsn, 0, "", "tasks"); !strings.Contains(out, "SELECT 1") {
			t.Errorf("the task did not survive down and up: %q", out)
		}

		// A dirty version, and the repair the refusal names.
		var fix string
		if sqlite {
			qcExpect(t, dsn, 0, "", "migrate", "down", "14")
			execOn(t, dsn, `CREATE TABLE stageq_tasks_v15 (x int)`) // in migration 15's path
			// The server's message, not golang-migrate's quote of the whole
			// file, and the way out.
			code, _, errOut := qc(t, dsn, "migrate", "up")
			if code != 1 || !strings.Contains(errOut, "migration 15 failed: SQL logic error: table stageq_tasks_v15 already exists") ||
				!strings.Contains(errOut, "queuectl migrate force 14` (undone)") || strings.Contains(errOut, "INSERT INTO") {
				t.Errorf("a failed migration's report: exit %d, %q", code, errOut)
			}
			qcExpect(t, dsn, 1, "version 15 is dirty: a migration failed half way; finish or undo", "migrate", "up")
			// Migration 15 ran in a transaction: undone already, so 14.
			execOn(t, dsn, `DROP TABLE stageq_tasks_v15`)
			fix = "14"
		} else {
			qcExpect(t, dsn, 1, "`queuectl migrate force 13` puts the record back", "migrate", "down", "12")
			fix = "13"
		}
		if out := qcExpect(t, dsn, 1, "dirty", "migrate", "version"); !strings.Contains(out, "(dirty)") {
			t.Errorf("version of a dirty database: %q", out)
		}
		qcExpect(t, dsn, 1, "queuectl migrate force", "tasks")
		qcExpect(t, dsn, 1, "is dirty", "migrate", "down", "1") // refused too: repair first
		qcExpect(t, dsn, 0, "recorded as "+fix+", clean; nothing ran", "migrate", "force", fix)
		qcExpect(t, dsn, 0, "schema is at version 15", "migrate", "up")
		if out := qcExpect(t, dsn, 0, "", "tasks"); !strings.Contains(out, "SELECT 1") {
			t.Errorf("the task did not survive the repair: %q", out)
		}
	})
}

// execOn runs one statement on the queue database at dsn, as an operator's
// hand would.
func execOn(t *testing.T, dsn, stmt string) {
	t.Helper()
	if _, err := qcDialect(t, dsn).DB().ExecContext(context.Background(), stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}
