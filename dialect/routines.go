package dialect

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"time"
)

// Routines is the queue logic a dialect keeps inside its database (PL/pgSQL
// functions, T-SQL procedures), installed and versioned apart from the
// tables. Version N lives in a namespace of its own, stageq_r<N>, and a binary
// calls only its own version's routines: workers built with N and with N+1
// run side by side on one database during a rolling upgrade, each with the
// logic it was tested with, while the tables (migrations/) change only in ways
// both accept (Schema.Floor). The routines package installs, checks and prunes them.
type Routines struct {
	// Version numbers the routines; any change to Files is a new version, and
	// routines/routines_test.go pins the checksum of the current one.
	Version int
	// Files are the sources: NN_job.sql installed in name order, each run as one
	// batch, into the version's namespace; public/*.sql are the entry points
	// users' own SQL calls (stageq.enqueue, EXEC stageq.Enqueue), kept in schema
	// stageq and pointed at the newest installed version. Every file names the
	// namespace RoutinePlaceholder; installing renders it (Render).
	Files fs.FS
	// SQL is how the dialect installs, lists and drops a version.
	SQL RoutineSQL
}

// RoutineSQL is one dialect's statements for the routines package.
type RoutineSQL struct {
	// Lock takes a lock held to the end of the transaction it runs in, so that
	// two installs (two workers started with --migrate) or an install and a
	// prune never interleave.
	Lock string
	// LockShared takes the same lock in shared mode, to the end of the
	// transaction: an install that finds its version there reads under it, so
	// that workers starting together do not wait for each other, while an
	// install or a prune that holds Lock makes them wait until it commits.
	LockShared string
	// Prepare runs in the install transaction before the files.
	Prepare []string
	// CreateNamespace creates the empty namespace ns, inside tx.
	CreateNamespace func(ctx context.Context, tx *sql.Tx, ns string) error
	// DropNamespace drops namespace ns and everything in it, inside tx; it
	// succeeds when ns does not exist.
	DropNamespace func(ctx context.Context, tx *sql.Tx, ns string) error
	// List reads the installed versions: version, checksum, installed_at,
	// newest first.
	List string
	// Record registers an installed version: arguments version, checksum.
	Record string
	// Forget removes a version's row: argument version.
	Forget string
	// Arg passes an argument to these statements: v itself where parameters
	// are positional, sql.Named(name, v) where the dialect names them.
	Arg func(name string, v any) any
	// InUse reads the routine versions live workers call, with how many call
	// each: argument the heartbeat age in milliseconds within which a worker
	// that has not stopped counts as live, measured by the database's clock.
	InUse string
}

// RoutinePlaceholder is the namespace the routine sources are written
// against; installing version N puts RoutineNamespace(N) in its place.
const RoutinePlaceholder = "stageq_routines"

// RoutineNamespace is the schema version n of the routines lives in.
func RoutineNamespace(n int) string { return fmt.Sprintf("stageq_r%d", n) }

// Namespace is the schema r's version lives in.
func (r Routines) Namespace() string { return RoutineNamespace(r.Version) }

// placeholderRe finds RoutinePlaceholder as a qualifier: a whole word, so a
// name that merely ends in it (my_stageq_routines.x) stays as written.
var placeholderRe = regexp.MustCompile(`\b` + regexp.QuoteMeta(RoutinePlaceholder+"."))

// Render puts r's namespace in place of RoutinePlaceholder in text (a routine
// source, or a dialect statement that calls a routine).
func (r Routines) Render(text string) string {
	return placeholderRe.ReplaceAllLiteralString(text, r.Namespace()+".")
}

// Validate says whether r can be installed and called: it has sources, and a
// version from 1 up (the registry's CHECK; stageq_r0 or stageq_r-1 would be
// a namespace no release means).
func (r Routines) Validate() error {
	if r.Files == nil {
		return fmt.Errorf("routines version %d: no source files", r.Version)
	}
	if r.Version < 1 {
		return fmt.Errorf("routines: version %d; versions start at 1", r.Version)
	}
	return nil
}

// Sources lists r's files: the routines in install order, then the entry points.
func (r Routines) Sources() (routines, public []string, err error) {
	if err := r.Validate(); err != nil {
		return nil, nil, err
	}
	err = fs.WalkDir(r.Files, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || path.Ext(p) != ".sql" {
			return err
		}
		if path.Dir(p) == "public" {
			public = append(public, p)
		} else {
			routines = append(routines, p)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("routines: list sources: %w", err)
	}
	sort.Strings(routines)
	sort.Strings(public)
	return routines, public, nil
}

// Checksum identifies r's sources: SHA-256 over every file's name and text, in
// install order. Two builds that disagree on it are two different versions.
func (r Routines) Checksum() (string, error) {
	routines, public, err := r.Sources()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, p := range append(routines, public...) {
		b, err := fs.ReadFile(r.Files, p)
		if err != nil {
			return "", fmt.Errorf("routines: read %s: %w", p, err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// RoutineVersion is one installed version, as the database records it.
type RoutineVersion struct {
	Version     int       `json:"version"`
	Namespace   string    `json:"namespace"`
	Checksum    string    `json:"checksum"`
	InstalledAt time.Time `json:"installed_at"`
	// Workers counts the live workers that call this version.
	Workers int `json:"workers"`
}

// RoutineCalls holds a dialect's statements that call its routines, each
// rendered once for the version one dialect value uses.
type RoutineCalls struct {
	r        Routines
	rendered map[string]string
}

// NewRoutineCalls renders statements for r.
func NewRoutineCalls(r Routines, statements ...string) *RoutineCalls {
	c := &RoutineCalls{r: r, rendered: make(map[string]string, len(statements))}
	for _, s := range statements {
		c.rendered[s] = r.Render(s)
	}
	return c
}

// SQL is statement s for this version: rendered in advance when s was listed,
// else now.
func (c *RoutineCalls) SQL(s string) string {
	if out, ok := c.rendered[s]; ok {
		return out
	}
	return c.r.Render(s)
}

// Routines is the version these calls are rendered for.
func (c *RoutineCalls) Routines() Routines { return c.r }

// Release is what a binary brings to its database besides its Go code: the
// table migrations it knows and the routines it calls. A dialect opened with
// Open uses its embedded ones; a test of a rolling upgrade opens a second
// dialect value with the next release's (OpenRelease), in the same process.
type Release struct {
	// Migrations replaces the dialect's embedded migrations when not nil.
	Migrations fs.FS
	// Routines replaces the dialect's embedded routines when not nil: their
	// Version and Files; how they are installed stays the dialect's own
	// (its RoutineSQL). A dialect that keeps none ignores it.
	Routines *Routines
}

// MigrationsOr is rel's migrations, or cur when rel brings none.
func (rel Release) MigrationsOr(cur fs.FS) fs.FS {
	if rel.Migrations != nil {
		return rel.Migrations
	}
	return cur
}

// RoutinesOr is cur with rel's routine version and files, or cur itself when
// rel brings none. How they are installed stays cur's (its SQL): that is the
// dialect's, whichever release's logic it installs.
func (rel Release) RoutinesOr(cur Routines) Routines {
	if rel.Routines != nil {
		cur.Version, cur.Files = rel.Routines.Version, rel.Routines.Files
	}
	return cur
}

// ReleaseUser is a dialect that can act as another release's binary.
type ReleaseUser interface {
	// UseRelease makes the dialect serve rel's migrations and call rel's
	// routines; it is called once, right after Open, before any use.
	UseRelease(rel Release)
}

// OpenRelease is Open for a binary of another release (see Release).
func OpenRelease(ctx context.Context, dsn string, rel Release) (Dialect, error) {
	d, err := Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	u, ok := d.(ReleaseUser)
	if !ok {
		d.Close()
		return nil, fmt.Errorf("open release: the %s dialect cannot serve another release", d.Name())
	}
	u.UseRelease(rel)
	return d, nil
}
