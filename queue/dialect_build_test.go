package queue_test

import (
	"os/exec"
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
