package migrations_test

import (
	"fmt"
	"io/fs"
	"testing"

	"github.com/stageq/stageq/migrations"
)

// TestDialectsShareVersions: every dialect's folder holds the same set of schema
// versions, so a version number means the same step everywhere. A step that does
// not apply to a dialect still gets a (placeholder) file there.
func TestDialectsShareVersions(t *testing.T) {
	dialects := []string{"postgres", "sqlite", "sqlserver"}
	sets := map[string]string{}
	for _, d := range dialects {
		vs, err := migrations.Versions(d)
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		if len(vs) == 0 {
			t.Fatalf("%s: no migrations", d)
		}
		sets[d] = fmt.Sprint(vs)
	}
	for _, d := range dialects[1:] {
		if sets[d] != sets[dialects[0]] {
			t.Errorf("%s has versions %s, %s has %s", d, sets[d], dialects[0], sets[dialects[0]])
		}
	}
}

// TestEveryVersionHasBothDirections: golang-migrate needs an up file for each
// version; a down file keeps `migrate down` possible.
func TestEveryVersionHasBothDirections(t *testing.T) {
	for _, d := range []string{"postgres", "sqlite", "sqlserver"} {
		fsys, err := migrations.FS(d)
		if err != nil {
			t.Fatal(err)
		}
		vs, err := migrations.Versions(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			for _, dir := range []string{"up", "down"} {
				pattern := fmt.Sprintf("%06d_*.%s.sql", v, dir)
				if m, err := fs.Glob(fsys, pattern); err != nil || len(m) != 1 {
					t.Errorf("%s: version %d: want one %s file, found %v (%v)", d, v, dir, m, err)
				}
			}
		}
	}
}
