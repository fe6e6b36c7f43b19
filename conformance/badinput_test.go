package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stageq/stageq/dialect"
)

// TestBadInputChangesNothing: every kind of bad input to the commands gets a
// clear message and a non-zero exit, and nothing is written.
func TestBadInputChangesNothing(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		dir := t.TempDir()
		write := func(name, content string) string {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}
		cases := []struct {
			name     string
			args     []string
			stdin    string
			code     int
			wantText string
		}{
			{"unknown flag", []string{"--ordr", "1", "SELECT 1"}, "", 2, "unknown flag: --ordr"},
			{"negative order", []string{"--order", "-5", "SELECT 1"}, "", 2, "order must be >= 0"},
			{"non-numeric order", []string{"--order", "ten", "SELECT 1"}, "", 2, `invalid argument "ten"`},
			{"empty body", []string{"--order", "1", "  "}, "", 2, "body must not be empty"},
			{"empty stdin body", []string{"--order", "1", "-"}, "", 2, "body must not be empty"},
			{"zero attempts", []string{"--max-attempts", "0", "SELECT 1"}, "", 2, "max-attempts must be >= 1"},
			{"bad run-at", []string{"--run-at", "tomorrow", "SELECT 1"}, "", 2, "RFC 3339"},
			{"no body", []string{"--order", "1"}, "", 2, "nothing to enqueue"},
			{"body and file", []string{"--file", "x.yaml", "SELECT 1"}, "", 2, "not both"},
			{"plan: yaml syntax", []string{"--file", write("syntax.yaml", "stages: [order: 1\n")}, "", 2, "invalid plan"},
			{"plan: unknown field", []string{"--file", write("field.yaml", "stages:\n  - order: 1\n    taks: []\n")}, "", 2, "field taks not found"},
			{"plan: negative order", []string{"--file", write("neg.json", `{"stages":[{"order":-1,"tasks":[{"body":"SELECT 1"}]}]}`)}, "", 2, "order must be >= 0"},
			{"plan: missing order", []string{"--file", write("noorder.yaml", "stages:\n  - tasks:\n      - body: SELECT 1\n")}, "", 2, "order is required"},
			{"plan: no body", []string{"--file", write("nobody.yaml", "stages:\n  - order: 1\n    tasks:\n      - kind: sql\n")}, "", 2, "body must not be empty"},
			{"plan: second task bad", []string{"--file", write("second.yaml", "stages:\n  - order: 1\n    tasks:\n      - body: SELECT 1\n      - body: SELECT 2\n        max_attempts: -1\n")}, "", 2, "tasks[1]: max_attempts"},
			{"plan: wrong extension", []string{"--file", write("plan.txt", "stages: []")}, "", 2, ".yaml, .yml or .json"},
			{"plan: missing file", []string{"--file", filepath.Join(dir, "absent.yaml")}, "", 2, "no such file"},
			{"plan: empty", []string{"--file", write("empty.yaml", "")}, "", 2, "empty"},
			{"plan: duplicate stage", []string{"--file", write("dup.yaml", "stages:\n  - order: 1\n    tasks: [{body: a}]\n  - order: 1\n    tasks: [{body: b}]\n")}, "", 2, "appears twice"},
		}
		for _, c := range cases {
			args := append([]string{"--dsn", db.DSN}, c.args...)
			code, stdout, stderr := runCLI(t, "enqueue", c.stdin, args...)
			if code != c.code {
				t.Errorf("%s: exit %d, want %d (stderr %q)", c.name, code, c.code, stderr)
			}
			if !strings.Contains(stderr, c.wantText) {
				t.Errorf("%s: stderr %q does not say %q", c.name, stderr, c.wantText)
			}
			if stdout != "" {
				t.Errorf("%s: printed %q on stdout", c.name, stdout)
			}
		}
		assertEmpty(t, db)
	})
}

// TestBadDSN: a DSN that does not connect fails with a message that names the
// database but never its password; an unknown scheme lists the known ones.
func TestBadDSN(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ dsn, want string }{
		{"postgres://stageq:s3cret-pw@127.0.0.1:1/none?connect_timeout=2", "connect to postgres"},
		{"nosuch://host/db", "postgres, postgresql, sqlite, sqlserver"},
		{"stageq.db", "has no scheme"},
		{"sqlite://", "names no file"},
	} {
		for _, cmd := range [][]string{{"enqueue", "SELECT 1"}, {"worker"}, {"queuectl", "logs"}} {
			if cmd[0] == "worker" && strings.HasPrefix(c.dsn, "postgres") {
				continue // a worker waits for a database that is down (internal/cli: TestConnectTimeout)
			}
			args := append([]string{"--dsn", c.dsn}, cmd[1:]...)
			code, _, stderr := runCLI(t, cmd[0], "", args...)
			if code == 0 {
				t.Errorf("%s --dsn %s: exit 0", cmd[0], c.dsn)
			}
			if !strings.Contains(stderr, c.want) {
				t.Errorf("%s --dsn %s: stderr %q does not say %q", cmd[0], c.dsn, stderr, c.want)
			}
			if strings.Contains(stderr, "s3cret-pw") {
				t.Errorf("%s: the password reached stderr: %q", cmd[0], stderr)
			}
		}
	}
}

// TestSchemaVersionRefused: a binary refuses a database whose schema is newer
// than it and no longer serves its version (the floor is above it), and says
// which it found and which it expects; a newer schema whose floor still admits
// it (a rolling upgrade's added columns) is served.
func TestSchemaVersionRefused(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		table := map[string]string{"sqlite": "stageq_schema_migrations", "postgres": "stageq.schema_migrations",
			"sqlserver": "stageq.schema_migrations"}[db.Dialect]
		floor := map[string]string{"sqlite": "stageq_schema_floor", "postgres": "stageq.schema_floor",
			"sqlserver": "stageq.SchemaFloor"}[db.Dialect]
		db.exec(t, "UPDATE "+table+" SET version = 99")
		if code, _, stderr := runCLI(t, "enqueue", "", "--dsn", db.DSN, "SELECT 1"); code != 0 {
			t.Errorf("enqueue on schema 99 whose floor admits this binary: exit %d, stderr %q", code, stderr)
		}
		db.exec(t, "UPDATE "+floor+" SET oldest_binary = 99")
		for _, cmd := range [][]string{{"enqueue", "SELECT 1"}, {"worker"}} {
			code, _, stderr := runCLI(t, cmd[0], "", append([]string{"--dsn", db.DSN}, cmd[1:]...)...)
			if code == 0 || !strings.Contains(stderr, "version 99") || !strings.Contains(stderr, "upgrade the binary") {
				t.Errorf("%s on schema 99: exit %d, stderr %q", cmd[0], code, stderr)
			}
		}
		code, stdout, _ := runCLI(t, "queuectl", "", "--dsn", db.DSN, "migrate", "version")
		if code == 0 || !strings.Contains(stdout, "database: 99") {
			t.Errorf("migrate version: exit %d, stdout %q", code, stdout)
		}
		// A database that was never migrated is refused too, with the remedy.
		empty := "sqlite://" + filepath.Join(t.TempDir(), "empty.db")
		code, _, stderr := runCLI(t, "enqueue", "", "--dsn", empty, "SELECT 1")
		if code == 0 || !strings.Contains(stderr, "migrate up") {
			t.Errorf("unmigrated database: exit %d, stderr %q", code, stderr)
		}
	})
}

func assertEmpty(t *testing.T, db *testDB) {
	t.Helper()
	tasks := db.tasks(t, dialect.TaskFilter{})
	if len(tasks) != 0 {
		t.Errorf("bad input wrote %d tasks: %+v", len(tasks), tasks)
	}
	if n := len(db.logs(t, dialect.LogFilter{})); n != 0 {
		t.Errorf("bad input wrote %d log rows", n)
	}
}
