package cli

import (
	"fmt"
	"strings"
	"testing"

	pgroutines "github.com/stageq/stageq/routines/postgres"
	msroutines "github.com/stageq/stageq/routines/sqlserver"
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
		version := pgroutines.Version
		if strings.HasPrefix(dsn, "sqlserver") {
			version = msroutines.Version
		}
		namespace := fmt.Sprintf("stageq_r%d", version)
		if !strings.Contains(out, namespace) || !strings.Contains(out, "yes") {
			t.Errorf("migrate routines: %q", out)
		}
		if out := qcExpect(t, dsn, 0, "", "migrate", "prune-routines"); !strings.Contains(out, "nothing to drop") {
			t.Errorf("prune-routines with one version: %q", out)
		}
		if out := qcExpect(t, dsn, 0, "", "migrate", "up"); !strings.Contains(out, fmt.Sprintf("routines version %d (schema %s)", version, namespace)) {
			t.Errorf("migrate up: %q", out)
		}
		if out := qcExpect(t, dsn, 0, "", "migrate", "routines", "--json"); !strings.Contains(out, fmt.Sprintf(`"namespace": %q`, namespace)) {
			t.Errorf("migrate routines --json: %q", out)
		}
	})
}
