// Package migrations applies and checks stageq's schema with golang-migrate.
//
// Each dialect owns its migrations (dialect.Schema): the files live in this
// folder, one package per dialect (migrations/postgres, …), embedded by that
// dialect, numbered alike in every dialect. A binary knows the newest version
// its dialect embeds (Expected) and refuses to run on a database whose schema
// is older or dirty, or newer with a floor above it (dialect.Schema.Floor): see
// Check. The routines a dialect keeps in the database are versioned apart
// (package routines); Up installs them and Check requires them.
package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/routines"
)

// Target is a database to migrate: a dialect.Dialect is one.
type Target interface {
	Name() string
	Where() string // the database, named in Check's refusals
	DB() *sql.DB
	Schema() dialect.Schema
}

// ErrSchemaMismatch means the database's schema is not the one this binary expects.
var ErrSchemaMismatch = errors.New("schema version mismatch")

// ErrNewer means the database's schema is newer than this binary (it wraps
// ErrSchemaMismatch): upgrade the binary; migrating cannot help.
var ErrNewer = fmt.Errorf("%w: the database's schema is newer than this binary", ErrSchemaMismatch)

// Versions lists the versions a folder of migrations holds, ascending.
func Versions(files fs.FS) ([]uint, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	seen := map[uint]bool{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		num, _, ok := strings.Cut(path.Base(e.Name()), "_")
		if !ok {
			continue
		}
		v, err := strconv.ParseUint(num, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("migration file %s: version is not a number", e.Name())
		}
		seen[uint(v)] = true
	}
	out := make([]uint, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// Expected is the newest schema version a dialect's migrations hold.
func Expected(s dialect.Schema) (uint, error) {
	if s.Files == nil {
		return 0, errNoSchema
	}
	vs, err := Versions(s.Files)
	if err != nil {
		return 0, err
	}
	if len(vs) == 0 {
		return 0, errors.New("migrations: none embedded")
	}
	return vs[len(vs)-1], nil
}

// Migrator opens golang-migrate on the dialect's embedded migrations, for a
// step this package does not take itself (in tests). It runs on a connection
// pool of its own (dialect.Schema.Driver): the caller closes it with Close,
// which leaves t's pool alone.
func Migrator(ctx context.Context, t Target) (*migrate.Migrate, error) {
	s, err := schemaOf(t)
	if err != nil {
		return nil, err
	}
	drv, err := s.Driver(ctx, t.DB())
	if err != nil {
		return nil, fmt.Errorf("migrations: open %s driver: %w", t.Name(), err)
	}
	source, err := iofs.New(s.Files, ".")
	if err != nil {
		drv.Close()
		return nil, fmt.Errorf("migrations: read embedded files: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", source, t.Name(), drv)
	if err != nil {
		drv.Close()
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return m, nil
}

// Up applies every migration the database lacks, then installs the
// binary's routines (routines.Install) when its dialect keeps any. Already
// being current is success. A database newer than the binary is left alone
// when its floor still admits the binary (a rolling upgrade's older workers
// restarting with --migrate), and refused otherwise (ErrNewer). It returns the
// version the database is at afterwards.
func Up(ctx context.Context, t Target) (uint, error) {
	s, err := schemaOf(t)
	if err != nil {
		return 0, err
	}
	want, err := Expected(s)
	if err != nil {
		return 0, err
	}
	got, dirty, err := s.Version(ctx, t.DB())
	if err != nil {
		return 0, err
	}
	if dirty || got <= want {
		v, err := upTables(ctx, t)
		if err != nil {
			// A newer release may have migrated past this binary's newest
			// version between the read above and golang-migrate's own (two
			// workers started with --migrate in a rolling upgrade):
			// golang-migrate then finds no file for the database's version.
			// Judged as if that had been read first, by the floor.
			now, nowDirty, rerr := s.Version(ctx, t.DB())
			if rerr != nil || nowDirty || now <= want {
				return v, err
			}
			v = now
			if err := admits(ctx, t, s, now, want); err != nil {
				return now, err
			}
		}
		got = v
	} else if err := admits(ctx, t, s, got, want); err != nil {
		return got, err
	}
	if s.Routines != nil {
		if err := routines.Install(ctx, t.DB(), *s.Routines); err != nil {
			return got, mismatch(err)
		}
	}
	return got, nil
}

func upTables(ctx context.Context, t Target) (uint, error) {
	m, err := Migrator(ctx, t)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		if de := (migrate.ErrDirty{}); errors.As(err, &de) {
			return uint(de.Version), fmt.Errorf("migrate up: %w", dirtyError(t, uint(de.Version)))
		}
		if v, dirty, verr := m.Version(); verr == nil && dirty {
			// Final, as the dirty version it leaves: another try meets it.
			return v, fmt.Errorf("migrate up: %w: migration %d failed: %w; its version is recorded dirty: %s",
				ErrSchemaMismatch, v, brief(err), repairAdvice(t, v, true, false))
		}
		return 0, fmt.Errorf("migrate up: %w", brief(err))
	}
	v, dirty, err := m.Version()
	if err != nil {
		return 0, fmt.Errorf("migrate: read version: %w", err)
	}
	if dirty {
		return v, fmt.Errorf("migrate: %w", dirtyError(t, v))
	}
	return v, nil
}

// admits says whether a database at version got, newer than the binary's
// want, still serves the binary: its floor is at or below want.
func admits(ctx context.Context, t Target, s dialect.Schema, got, want uint) error {
	floor, err := s.Floor(ctx, t.DB())
	if err != nil {
		return err
	}
	if floor == 0 || floor > want {
		return fmt.Errorf("%w: version %d, which serves binaries of version %d and later, and this binary knows up to %d: upgrade the binary",
			ErrNewer, got, max(floor, got), want)
	}
	return nil
}

// Version reads the schema version the database is at; 0 when stageq's schema
// was never applied.
func Version(ctx context.Context, t Target) (version uint, dirty bool, err error) {
	s, err := schemaOf(t)
	if err != nil {
		return 0, false, err
	}
	return s.Version(ctx, t.DB())
}

// errNoSchema: a dialect whose Schema leaves a part out (a dialect written
// outside this module, say) is refused, not followed into a nil function.
var errNoSchema = errors.New("migrations: the dialect's Schema lacks its files, driver, version or floor read")

// schemaOf is t's Schema, every part present.
func schemaOf(t Target) (dialect.Schema, error) {
	s := t.Schema()
	if s.Files == nil || s.Driver == nil || s.Version == nil || s.Floor == nil {
		return s, fmt.Errorf("%s: %w", t.Name(), errNoSchema)
	}
	return s, nil
}

// Check refuses a database whose schema this binary cannot run on: never
// migrated, older, dirty, newer with a floor above the binary's version, or
// without the binary's routines. The error says which database, what was
// found and what is expected: a worker whose DSN has a typo, or names a
// SQLite file relative to another working directory, meets an empty
// database, and the file it names is the clue.
func Check(ctx context.Context, t Target) error {
	if err := check(ctx, t); err != nil {
		return fmt.Errorf("%s: %w", t.Where(), err)
	}
	return nil
}

func check(ctx context.Context, t Target) error {
	s, err := schemaOf(t)
	if err != nil {
		return err
	}
	want, err := Expected(s)
	if err != nil {
		return err
	}
	got, dirty, err := s.Version(ctx, t.DB())
	if err != nil {
		return err
	}
	switch {
	case dirty:
		return dirtyError(t, got)
	case got == 0:
		return fmt.Errorf("%w: the database has no stageq schema; this binary expects version %d: run `queuectl migrate up` or `worker --migrate`", ErrSchemaMismatch, want)
	case got < want:
		return fmt.Errorf("%w: the database's schema is version %d; this binary expects %d: run `queuectl migrate up` or `worker --migrate`", ErrSchemaMismatch, got, want)
	case got > want:
		if err := admits(ctx, t, s, got, want); err != nil {
			return err
		}
	}
	return CheckRoutines(ctx, t)
}

// CheckRoutines is the routine half of Check: whether the database holds the
// binary's routine version, read under the lock a prune holds. A worker calls
// it again once it has registered (queue/register.go), from when on a prune
// counts it while it heartbeats.
func CheckRoutines(ctx context.Context, t Target) error {
	s, err := schemaOf(t)
	if err != nil {
		return err
	}
	if s.Routines == nil {
		return nil
	}
	if err := routines.Check(ctx, t.DB(), *s.Routines); err != nil {
		return mismatch(err)
	}
	return nil
}

// mismatch marks the routine errors that no retry can cure (missing, or from
// other sources) as ErrSchemaMismatch, which callers treat as final; a lost
// connection while reading the registry stays what it is.
func mismatch(err error) error {
	if errors.Is(err, routines.ErrNotInstalled) || errors.Is(err, routines.ErrChecksum) {
		return fmt.Errorf("%w: %w", ErrSchemaMismatch, err)
	}
	return err
}
