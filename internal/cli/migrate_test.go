package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMigrateDownAndForce: an operator goes down two versions and up again
// with queuectl alone, and repairs a dirty version the way the refusals say:
// on PostgreSQL migration 13's down refuses (this database never had version
// 12's functions); on SQLite migration 15 fails on a table in its path. Each
// leaves golang-migrate's record dirty, every command refuses the database
// naming the versions to force, and force then up bring it back into service.
func TestMigrateDownAndForce(t *testing.T) {
	qcDatabases(t, func(t *testing.T, dsn string) {
		sqlite := strings.HasPrefix(dsn, "sqlite")
		qcExpect(t, dsn, 0, "", "enqueue", "SELECT 1")

		// Targets refused before anything changes (exit 2).
		qcExpect(t, dsn, 2, "a whole number from 1", "migrate", "down", "0")
		qcExpect(t, dsn, 2, "a whole number from 1", "migrate", "down", "x")
		qcExpect(t, dsn, 2, "versions 1 to 15, not 99", "migrate", "force", "99")
		qcExpect(t, dsn, 2, "down goes to an older version, not 15", "migrate", "down", "15")
		qcExpect(t, dsn, 2, "schema version 15 is not dirty", "migrate", "force", "13")

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

		// A dirty version: the failed command's own error names the one way
		// out; every other command names both, not knowing which failed.
		var fix string
		if sqlite {
			qcExpect(t, dsn, 0, "", "migrate", "down", "14")
			execOn(t, dsn, `CREATE TABLE stageq_tasks_v15 (x int)`) // in migration 15's path
			// The server's message, not golang-migrate's quote of the whole file.
			code, _, errOut := qc(t, dsn, "migrate", "up")
			if code != 1 || !strings.Contains(errOut, "migration 15 failed: SQL logic error: table stageq_tasks_v15 already exists") ||
				!strings.Contains(errOut, "record `queuectl migrate force 14` once what migration 15 changed is undone, or `force 15`") ||
				strings.Contains(errOut, "INSERT INTO") || strings.Contains(errOut, "down") {
				t.Errorf("a failed migration's report: exit %d, %q", code, errOut)
			}
			qcExpect(t, dsn, 1, "if `migrate up` failed, record `queuectl migrate force 14`", "tasks")
			execOn(t, dsn, `DROP TABLE stageq_tasks_v15`) // rolled back: undone already
			fix = "14"
		} else {
			code, _, errOut := qc(t, dsn, "migrate", "down", "12")
			if code != 1 || !strings.Contains(errOut, "stageq: schema version 13 cannot be migrated down to 12") ||
				!strings.Contains(errOut, "record `queuectl migrate force 13` once what migration 13's down file changed is undone, or `force 12`") ||
				strings.Contains(errOut, "(column 0)") || strings.Contains(errOut, "`migrate up` failed") {
				t.Errorf("a refused down's report: exit %d, %q", code, errOut)
			}
			_, _, errOut = qc(t, dsn, "tasks")
			if !strings.Contains(errOut, "if `migrate up` failed, record `queuectl migrate force 11`") ||
				!strings.Contains(errOut, "if `migrate down` failed, record `queuectl migrate force 13`") {
				t.Errorf("tasks on a database a down left dirty: %q", errOut)
			}
			fix = "13"
		}
		if out := qcExpect(t, dsn, 1, "dirty", "migrate", "version"); !strings.Contains(out, "(dirty)") {
			t.Errorf("version of a dirty database: %q", out)
		}
		qcExpect(t, dsn, 1, "is dirty", "migrate", "down", "1") // refused too: repair first
		// A worker started with --migrate stops at once, saying so: no retry
		// can clear a dirty version.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var out, logs syncBuffer
		code := Execute(ctx, NewWorkerCommand(), []string{"--dsn", dsn, "--migrate", "--log-format", "json"}, &out, &logs)
		cancel()
		if code != ExitFailure || !strings.Contains(logs.String(), "is dirty") || strings.Contains(logs.String(), "retrying") {
			t.Errorf("worker --migrate on a dirty database: exit %d, stderr %q; want exit 1 at once, saying it is dirty", code, logs.String())
		}
		qcExpect(t, dsn, 0, "recorded as "+fix+", clean; nothing ran", "migrate", "force", fix)
		qcExpect(t, dsn, 0, "schema is at version 15", "migrate", "up")
		if out := qcExpect(t, dsn, 0, "", "tasks"); !strings.Contains(out, "SELECT 1") {
			t.Errorf("the task did not survive the repair: %q", out)
		}

		// Dirty at a version of a newer release: this binary cannot repair it.
		table := map[bool]string{true: "stageq_schema_migrations", false: "stageq.schema_migrations"}[sqlite]
		execOn(t, dsn, "UPDATE "+table+" SET version = 16, dirty = true")
		qcExpect(t, dsn, 1, "version 16 comes from a newer release than this binary (it knows up to 15): repair it with that release's queuectl", "tasks")
		execOn(t, dsn, "UPDATE "+table+" SET version = 15, dirty = false")
		qcExpect(t, dsn, 0, "", "tasks")
	})
}

// TestMigrateOnAnEmptyDatabase: down and force refuse a database that has
// no stageq schema, saying so.
func TestMigrateOnAnEmptyDatabase(t *testing.T) {
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "empty.db")
	qcExpect(t, dsn, 2, "has no stageq schema: nothing to go down from", "migrate", "down", "1")
	qcExpect(t, dsn, 2, "schema version 0 is not dirty", "migrate", "force", "15")
}

// execOn runs one statement on the queue database at dsn, as an operator's
// hand would.
func execOn(t *testing.T, dsn, stmt string) {
	t.Helper()
	if _, err := qcDialect(t, dsn).DB().ExecContext(context.Background(), stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// TestRefusalNamesTheDatabase: a relative SQLite DSN run from another working
// directory (a service's, say) opens a new, empty file there; the refusal names
// it, absolute, and so does migrate up.
func TestRefusalNamesTheDatabase(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	file := filepath.Join(dir, "queue.db")
	qcExpect(t, "sqlite://queue.db", 1, "sqlite file "+file+": schema version mismatch: the database has no stageq schema",
		"enqueue", "SELECT 1")
	qcExpect(t, "sqlite://queue.db", 0, "sqlite file "+file+": schema is at version", "migrate", "up")
}
