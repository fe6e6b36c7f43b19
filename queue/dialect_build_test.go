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

// A PostgreSQL-only build offers only the DSNs it can open: --help names no
// SQLite or SQL Server form and no SQLite default, and a command that opens
// the database without --dsn or STAGEQ_DSN asks for one (exit 2) instead of
// trying a SQLite file it does not link. Commands that open none (shell
// completion) need none.
func TestALeftOutDialectIsNotOffered(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("go", "build", "-tags", "stageq_no_sqlite,stageq_no_sqlserver", "-o", dir,
		"github.com/stageq/stageq/cmd/worker", "github.com/stageq/stageq/cmd/queuectl").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(prog string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(filepath.Join(dir, prog), args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()} // no STAGEQ_DSN
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return string(out), exit.ExitCode()
		}
		if err != nil {
			t.Fatalf("%s %v: %v", prog, args, err)
		}
		return string(out), 0
	}
	help, _ := run("worker", "--help")
	var dsnLine string
	for _, l := range strings.Split(help, "\n") {
		if strings.Contains(l, "--dsn") {
			dsnLine = l
		}
	}
	if !strings.Contains(dsnLine, "postgres://") || strings.Contains(dsnLine, "sqlite") || strings.Contains(dsnLine, "sqlserver") {
		t.Errorf("--dsn's help in a PostgreSQL-only build: %q", dsnLine)
	}
	for _, c := range [][]string{{"worker"}, {"queuectl", "status"}, {"queuectl", "migrate", "up"}} {
		if out, code := run(c[0], c[1:]...); code != 2 || !strings.Contains(out, "no database given") || !strings.Contains(out, "postgres") {
			t.Errorf("%v without a DSN in a PostgreSQL-only build: exit %d, %q; want exit 2 asking for --dsn", c, code, out)
		}
	}
	if out, code := run("queuectl", "completion", "bash"); code != 0 || !strings.Contains(out, "queuectl") {
		t.Errorf("queuectl completion bash without a DSN: exit %d, %.200q", code, out)
	}
}
