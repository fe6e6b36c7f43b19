package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/stageq/stageq/dialect"
)

// TestExitCodesMatchREADME: each case README's exit-code table puts in a class
// exits with that class's code (issue 10, item 8), and nothing is changed.
func TestExitCodesMatchREADME(t *testing.T) {
	qcDatabases(t, func(t *testing.T, dsn string) {
		before := qcSnapshot(t, dsn)
		for _, c := range []struct {
			want int
			says string
			args []string
		}{
			{2, "delay", []string{"enqueue", "--delay", "1s", "--run-at", "2030-01-01T00:00:00Z", "SELECT 1"}},
			{2, "token", []string{"lease", "extend", "x"}},
			{2, "token", []string{"lease", "release", "x"}},
			{3, "not found", []string{"schedule", "delete", "nosuch"}},
			{3, "not found", []string{"schedule", "pause", "nosuch"}},
			{3, "not found", []string{"schedule", "list", "nosuch"}},
			{3, "not found", []string{"schedule", "runs", "nosuch"}},
			{2, "--state", []string{"tasks", "--state", "bogus"}},
			{2, "--outcome", []string{"logs", "--outcome", "bogus"}},
			{2, "unknown command \"sideways\"", []string{"migrate", "sideways"}},
			{2, "accepts 1 arg", []string{"migrate", "down"}},
			{2, "needs a subcommand", []string{"limit"}},
			{2, "unknown command", []string{"schedule", "frobnicate"}},
		} {
			qcExpect(t, dsn, c.want, c.says, c.args...)
		}
		if after := qcSnapshot(t, dsn); after != before {
			t.Errorf("refused commands changed the queue:\n%s\n---\n%s", before, after)
		}
		for _, dsn := range []string{"mysql://root@h/db", "stageq.db"} {
			qcExpect(t, dsn, 2, "scheme", "status")
		}

		// A schema newer than the binary that no longer serves it (its floor
		// is above the binary's version): migrate up says so, clearly.
		d, err := dialect.Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		table := map[string]string{"sqlite": "stageq_schema_migrations", "postgres": "stageq.schema_migrations"}[d.Name()]
		floor := map[string]string{"sqlite": "stageq_schema_floor", "postgres": "stageq.schema_floor"}[d.Name()]
		for _, stmt := range []string{"UPDATE " + table + " SET version = 99", "UPDATE " + floor + " SET oldest_binary = 99"} {
			if _, err := d.DB().ExecContext(context.Background(), stmt); err != nil {
				t.Fatal(err)
			}
		}
		d.Close()
		code, _, stderr := qc(t, dsn, "migrate", "up")
		if code != ExitFailure || !strings.Contains(stderr, "version 99") || !strings.Contains(stderr, "upgrade the binary") {
			t.Errorf("migrate up on schema 99: exit %d, stderr %q", code, stderr)
		}
	})
}

// TestWorkerFlagsRefused: worker values that would silently fall back to a
// default exit 2 before touching the database.
func TestWorkerFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--concurrency", "0"}, {"--lease", "0s"}, {"--lease", "-1s"}, {"--poll-max", "0s"},
		{"--retry-base", "0s"}, {"--shutdown-grace", "-1s"}, {"--heartbeat", "-1s"},
		{"--heartbeat", "40s", "--lease", "30s"}, {"--heartbeat", "30s", "--lease", "5m"}, {"--vacuum-every", "0"},
	} {
		var out, errb syncBuffer
		code := Execute(context.Background(), NewWorkerCommand(),
			append([]string{"--dsn", "mysql://never-opened/x"}, args...), &out, &errb)
		if code != ExitUsage || !strings.Contains(errb.String(), "--"+strings.TrimPrefix(args[0], "--")) {
			t.Errorf("worker %v: exit %d, stderr %q", args, code, errb.String())
		}
	}
	// A Workers retention shorter than a live worker's silence between its
	// heartbeats: --retain-workers 3s --prune-every 1s deleted the worker's
	// own row while it ran. The floor is ten minutes.
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--retain-workers", "3s", "--prune-every", "1s"}, "--retain-workers must be at least 10m0s"},
		{[]string{"--retain-workers", "9m59s"}, "--retain-workers must be at least 10m0s"},
	} {
		var out, errb syncBuffer
		code := Execute(context.Background(), NewWorkerCommand(),
			append([]string{"--dsn", "mysql://never-opened/x"}, c.args...), &out, &errb)
		if code != ExitUsage || !strings.Contains(errb.String(), c.says) {
			t.Errorf("worker %v: exit %d, stderr %q; want exit 2 saying %q", c.args, code, errb.String(), c.says)
		}
	}
}
