package migrations_test

import (
	"context"
	"database/sql"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stageq/stageq/dialect"
	_ "github.com/stageq/stageq/dialect/sqlite" // a real dialect to wrap

	"github.com/stageq/stageq/migrations"
	"github.com/stageq/stageq/migrations/postgres"
	"github.com/stageq/stageq/migrations/sqlite"
	"github.com/stageq/stageq/migrations/sqlserver"
)

// dialects are the migrations each dialect embeds.
var dialects = []struct {
	name  string
	files fs.FS
}{{"postgres", postgres.Files}, {"sqlite", sqlite.Files}, {"sqlserver", sqlserver.Files}}

// TestDialectsShareVersions: every dialect's folder holds the same set of schema
// versions, so a version number means the same step everywhere. A step that does
// not apply to a dialect still gets a (placeholder) file there.
func TestDialectsShareVersions(t *testing.T) {
	sets := map[string]string{}
	for _, d := range dialects {
		vs, err := migrations.Versions(d.files)
		if err != nil {
			t.Fatalf("%s: %v", d.name, err)
		}
		if len(vs) == 0 {
			t.Fatalf("%s: no migrations", d.name)
		}
		sets[d.name] = fmt.Sprint(vs)
	}
	first := dialects[0].name
	for _, d := range dialects[1:] {
		if sets[d.name] != sets[first] {
			t.Errorf("%s has versions %s, %s has %s", d.name, sets[d.name], first, sets[first])
		}
	}
}

// TestEveryVersionHasBothDirections: golang-migrate needs an up file for each
// version; a down file keeps `migrate down` possible.
func TestEveryVersionHasBothDirections(t *testing.T) {
	for _, d := range dialects {
		vs, err := migrations.Versions(d.files)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			for _, dir := range []string{"up", "down"} {
				pattern := fmt.Sprintf("%06d_*.%s.sql", v, dir)
				if m, err := fs.Glob(d.files, pattern); err != nil || len(m) != 1 {
					t.Errorf("%s: version %d: want one %s file, found %v (%v)", d.name, v, dir, m, err)
				}
			}
		}
	}
}

// TestMigrationsKnowNoDialect: the package applies whatever a dialect's Schema
// hands it; it links no golang-migrate database driver and no dialect, so a
// new dialect touches nothing here.
func TestMigrationsKnowNoDialect(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "migrations.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		path := strings.Trim(imp.Path.Value, `"`)
		if strings.HasPrefix(path, "github.com/golang-migrate/migrate/v4/database/") ||
			strings.HasPrefix(path, "github.com/stageq/stageq/dialect/") {
			t.Errorf("migrations.go imports %s", path)
		}
	}
}

// withoutSchema is a real dialect whose Schema leaves every part out, as a
// dialect written outside this module might.
type withoutSchema struct{ dialect.Dialect }

func (withoutSchema) Schema() dialect.Schema { return dialect.Schema{} }

// TestIncompleteSchemaIsRefused: such a dialect gets an error from every
// entry point, not a nil-function panic.
func TestIncompleteSchemaIsRefused(t *testing.T) {
	ctx := context.Background()
	d, err := dialect.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "q.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	target := withoutSchema{d}
	if _, err := migrations.Up(ctx, target); err == nil {
		t.Error("Up with no schema succeeded")
	}
	if err := migrations.Check(ctx, target); err == nil {
		t.Error("Check with no schema succeeded")
	}
	if _, _, err := migrations.Version(ctx, target); err == nil {
		t.Error("Version with no schema succeeded")
	}
	if _, err := migrations.Expected(target.Schema()); err == nil {
		t.Error("Expected with no files succeeded")
	}
}

// TestNegativeFloorIsRefused: a floor is a schema version; a negative one, as
// a uint, would be huge and refuse every binary with a message that hides why.
func TestNegativeFloorIsRefused(t *testing.T) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := dialect.ReadFloor(db.QueryRow(`SELECT -1`)); err == nil {
		t.Error("a floor of -1 was read without an error")
	}
	if v, err := dialect.ReadFloor(db.QueryRow(`SELECT 13`)); err != nil || v != 13 {
		t.Errorf("a floor of 13: %d, %v", v, err)
	}
}
