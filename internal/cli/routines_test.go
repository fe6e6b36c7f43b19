package cli

import (
	"strings"
	"testing"
)

// TestMigrateRoutinesCLI: `migrate routines` lists the version this binary
// installed and marks it; `migrate prune-routines` keeps the only (newest)
// version; `migrate up` and `migrate version` name it. SQLite says it keeps
// none.
func TestMigrateRoutinesCLI(t *testing.T) {
	qcDatabases(t, func(t *testing.T, dsn string) {
		out := qcExpect(t, dsn, 0, "", "migrate", "routines")
		if strings.HasPrefix(dsn, "sqlite") {
			if !strings.Contains(out, "no routines") {
				t.Errorf("migrate routines on SQLite: %q", out)
			}
			return
		}
		if !strings.Contains(out, "stageq_r1") || !strings.Contains(out, "yes") {
			t.Errorf("migrate routines: %q", out)
		}
		if out := qcExpect(t, dsn, 0, "", "migrate", "prune-routines"); !strings.Contains(out, "nothing to drop") {
			t.Errorf("prune-routines with one version: %q", out)
		}
		if out := qcExpect(t, dsn, 0, "", "migrate", "up"); !strings.Contains(out, "routines version 1 (schema stageq_r1)") {
			t.Errorf("migrate up: %q", out)
		}
		if out := qcExpect(t, dsn, 0, "", "migrate", "routines", "--json"); !strings.Contains(out, `"namespace": "stageq_r1"`) {
			t.Errorf("migrate routines --json: %q", out)
		}
	})
}
