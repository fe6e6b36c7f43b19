package queue_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A build can leave out the dialects it does not use, and their drivers with
// them (queue/dialect_*.go): a PostgreSQL-only worker links neither the SQL
// Server driver nor SQLite.
func TestDialectsCanBeLeftOutOfABuild(t *testing.T) {
	deps := func(tags string) map[string]bool {
		t.Helper()
		args := []string{"list", "-deps"}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		out, err := exec.Command("go", append(args, "github.com/stageq/stageq/cmd/worker")...).CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		m := map[string]bool{}
		for _, p := range strings.Fields(string(out)) {
			m[p] = true
		}
		return m
	}
	drivers := []string{"github.com/jackc/pgx/v5", "modernc.org/sqlite", "github.com/microsoft/go-mssqldb"}
	all := deps("")
	for _, d := range drivers {
		if !all[d] {
			t.Errorf("the default build does not link %s", d)
		}
	}
	pgOnly := deps("stageq_no_sqlite,stageq_no_sqlserver")
	if !pgOnly[drivers[0]] {
		t.Errorf("a PostgreSQL-only build does not link pgx")
	}
	for _, d := range drivers[1:] {
		if pgOnly[d] {
			t.Errorf("a PostgreSQL-only build links %s", d)
		}
	}
}

// A PostgreSQL-only worker offers only the DSNs it can open: its --help names
// no SQLite or SQL Server form and no SQLite default, and without --dsn or
// STAGEQ_DSN it asks for one (exit 2) instead of trying a SQLite file it
// does not link.
func TestALeftOutDialectIsNotOffered(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "worker")
	if out, err := exec.Command("go", "build", "-tags", "stageq_no_sqlite,stageq_no_sqlserver",
		"-o", bin, "github.com/stageq/stageq/cmd/worker").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()} // no STAGEQ_DSN
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return string(out), exit.ExitCode()
		}
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return string(out), 0
	}
	help, _ := run("--help")
	var dsnLine string
	for _, l := range strings.Split(help, "\n") {
		if strings.Contains(l, "--dsn") {
			dsnLine = l
		}
	}
	if !strings.Contains(dsnLine, "postgres://") || strings.Contains(dsnLine, "sqlite") || strings.Contains(dsnLine, "sqlserver") {
		t.Errorf("--dsn's help in a PostgreSQL-only build: %q", dsnLine)
	}
	out, code := run()
	if code != 2 || !strings.Contains(out, "no database given") || !strings.Contains(out, "postgres") {
		t.Errorf("no --dsn in a PostgreSQL-only build: exit %d, %q; want exit 2 asking for --dsn", code, out)
	}
}
