package routines_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/dialect/postgres"
	"github.com/stageq/stageq/dialect/sqlserver"
	"github.com/stageq/stageq/routines"
)

// pinned is the checksum of each dialect's current routine version. A change
// to a routine file changes the checksum: raise the Version in that folder's
// files.go, and pin the new checksum here. A database that holds version N
// from other sources refuses the binary (routines.ErrChecksum), so two builds
// never mean two things by one version.
var pinned = map[string]struct {
	version  int
	checksum string
}{
	"postgres":  {11, "b89c2ed5bbef07788a8791b39d2fa29d0bb3ba5cb3ae7292d639c101da8f3d51"},
	"sqlserver": {3, "ff34c4168af4b2bf99f81b32421e390ba035adb9c9337593c36ee364e47607fe"},
}

func dialects() map[string]dialect.Routines {
	return map[string]dialect.Routines{"postgres": postgres.Routines(), "sqlserver": sqlserver.Routines()}
}

func TestVersionPinsSources(t *testing.T) {
	for name, r := range dialects() {
		sum, err := r.Checksum()
		if err != nil {
			t.Fatal(err)
		}
		p := pinned[name]
		if r.Version != p.version || sum != p.checksum {
			t.Errorf("%s routines: version %d, checksum %s; pinned: version %d, checksum %s. "+
				"A changed routine is a new version: raise Version in routines/%s/files.go and pin the new checksum",
				name, r.Version, sum, p.version, p.checksum, name)
		}
	}
}

// definedRe finds what a routine file creates: a function, procedure or type.
var definedRe = regexp.MustCompile(`(?i)CREATE\s+(?:OR\s+(?:REPLACE|ALTER)\s+)?(?:FUNCTION|PROCEDURE|TYPE)\s+([\w.]+)`)

var commentRe = regexp.MustCompile(`--[^\n]*`)

// TestSourcesNameOnlyTheirNamespace: a routine file creates its objects in
// the placeholder namespace and calls the others there, never the versionless
// copies migrations 1 to 12 left in schema stageq (which a version-12 worker
// may still use, and a later version must not); the entry points, in
// public/, are the only objects created in schema stageq.
func TestSourcesNameOnlyTheirNamespace(t *testing.T) {
	for name, r := range dialects() {
		files, public, err := r.Sources()
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 || len(public) == 0 {
			t.Fatalf("%s: %d routine files, %d entry points", name, len(files), len(public))
		}
		texts := map[string]string{}
		var objects []string
		for _, p := range append(files, public...) {
			b, err := fs.ReadFile(r.Files, p)
			if err != nil {
				t.Fatal(err)
			}
			texts[p] = string(b)
			for _, m := range definedRe.FindAllStringSubmatch(string(b), -1) {
				schema, object, _ := strings.Cut(m[1], ".")
				want := dialect.RoutinePlaceholder
				if strings.HasPrefix(p, "public/") {
					want = "stageq"
				}
				if schema != want {
					t.Errorf("%s/%s creates %s; want it in %s", name, p, m[1], want)
				}
				if !strings.HasPrefix(p, "public/") {
					objects = append(objects, object)
				}
			}
		}
		for p, text := range texts {
			text = definedRe.ReplaceAllString(text, "") // an entry point's own name
			text = commentRe.ReplaceAllString(text, "")
			for _, o := range objects {
				if regexp.MustCompile(`(?i)\bstageq\.` + regexp.QuoteMeta(o) + `\b`).MatchString(text) {
					t.Errorf("%s/%s names stageq.%s: a routine is called in its own version's namespace, %s.%s",
						name, p, o, dialect.RoutinePlaceholder, o)
				}
			}
		}
	}
}

// TestMigrationsCreateNoRoutines: the table migrations create no function or
// procedure; a routine in a migration would be logic tied to a schema version
// again, the thing this package exists to undo.
func TestMigrationsCreateNoRoutines(t *testing.T) {
	re := regexp.MustCompile(`(?i)\b(CREATE|ALTER)\s+(OR\s+(REPLACE|ALTER)\s+)?(FUNCTION|PROC|PROCEDURE)\b`)
	for _, d := range []string{"postgres", "sqlserver", "sqlite"} {
		dir := os.DirFS(filepath.Join("..", "migrations", d))
		files, err := fs.Glob(dir, "*.sql")
		if err != nil || len(files) == 0 {
			t.Fatalf("migrations/%s: %v", d, err)
		}
		for _, f := range files {
			b, err := fs.ReadFile(dir, f)
			if err != nil {
				t.Fatal(err)
			}
			if m := re.FindString(commentRe.ReplaceAllString(string(b), "")); m != "" {
				t.Errorf("migrations/%s/%s: %q; routines live in routines/%s", d, f, m, d)
			}
		}
	}
}

func TestRenderPutsTheVersionsNamespace(t *testing.T) {
	r := dialect.Routines{Version: 7}
	got := r.Render("SELECT * FROM stageq_routines.claim($1), my_stageq_routines.t; -- stageq_routines_note stays")
	if got != "SELECT * FROM stageq_r7.claim($1), my_stageq_routines.t; -- stageq_routines_note stays" {
		t.Errorf("render: %q", got)
	}
}

// Routines without sources, or numbered below 1, are refused before any
// database is touched (nil here): version 0 or -1 would name a namespace
// stageq_r0 or stageq_r-1 that no release means.
func TestRoutinesWithoutSourcesOrVersionAreRefused(t *testing.T) {
	good := postgres.Routines()
	noFiles, zero, negative := good, good, good
	noFiles.Files = nil
	zero.Version = 0
	negative.Version = -1
	for name, r := range map[string]dialect.Routines{"no files": noFiles, "version 0": zero, "version -1": negative} {
		if err := r.Validate(); err == nil {
			t.Errorf("%s: Validate passed", name)
		}
		if _, err := r.Checksum(); err == nil {
			t.Errorf("%s: Checksum passed", name)
		}
		if err := routines.Install(context.Background(), nil, r); err == nil {
			t.Errorf("%s: Install passed", name)
		}
	}
	if err := good.Validate(); err != nil {
		t.Errorf("this build's routines: %v", err)
	}
}

// A live window under a millisecond reaches the statements as 0 ms, which
// counts every worker dead: List and Prune refuse it before touching the
// database (nil here), so a prune cannot drop routines live workers call.
func TestLiveWindowUnderAMillisecondIsRefused(t *testing.T) {
	ctx := context.Background()
	for _, live := range []time.Duration{0, -time.Second, 500 * time.Microsecond} {
		if _, err := routines.Prune(ctx, nil, postgres.Routines(), live); err == nil || !strings.Contains(err.Error(), "live window") {
			t.Errorf("Prune with live window %s: %v", live, err)
		}
		if _, err := routines.List(ctx, nil, postgres.Routines(), live); err == nil || !strings.Contains(err.Error(), "live window") {
			t.Errorf("List with live window %s: %v", live, err)
		}
	}
}
