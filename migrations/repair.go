package migrations

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
)

// ErrBadTarget: Force or Down was given a version they cannot go to (one this
// binary holds no migration for, for Down one not older, for Force a database
// that is not dirty); nothing changed.
var ErrBadTarget = errors.New("bad target version")

// Force records version as the database's schema version, clean, without
// running any migration: the way out of a dirty version once the operator has
// undone or finished by hand what the failed migration left (dirtyAdvice says
// which version is which). 0 records no version at all (the first migration
// failed and was undone). Only a dirty database is taken: on a clean one a
// wrong version would make binaries run on tables they do not match, and
// migrate down is the way to an older version. Only versions this binary's
// files hold are taken, so the record always names a step some migration
// describes.
func Force(ctx context.Context, t Target, version uint) error {
	if version != 0 {
		if err := known(t, version); err != nil {
			return err
		}
	}
	got, dirty, err := Version(ctx, t)
	if err != nil {
		return err
	}
	if !dirty {
		return fmt.Errorf("%w: the database's schema version %d is not dirty: force only records where a failed migration left it (`queuectl migrate down` goes to an older version)", ErrBadTarget, got)
	}
	m, err := Migrator(ctx, t)
	if err != nil {
		return err
	}
	defer m.Close()
	to := int(version)
	if version == 0 {
		to = database.NilVersion
	}
	if err := m.Force(to); err != nil {
		return fmt.Errorf("migrate force %d: %w", version, err)
	}
	return nil
}

// Down runs the down migrations from the database's version to version, which
// must be older and at least 1 (dropping every table is not a repair step:
// drop the database or its stageq objects for that). Down migrations undo
// table changes only (README: an older release's logic comes with that
// release's `migrate up`). It returns the version the database is at
// afterwards; a refusal by a down file leaves golang-migrate's record dirty,
// and Force puts it back.
func Down(ctx context.Context, t Target, version uint) (uint, error) {
	if version == 0 {
		return 0, fmt.Errorf("%w: 0: down goes to version 1 at the lowest (dropping every table is not a migration step)", ErrBadTarget)
	}
	if err := known(t, version); err != nil {
		return 0, err
	}
	got, dirty, err := Version(ctx, t)
	switch {
	case err != nil:
		return 0, err
	case dirty:
		return got, dirtyError(t, got)
	case got == 0:
		return 0, fmt.Errorf("%w: the database has no stageq schema: nothing to go down from", ErrBadTarget)
	case version >= got:
		return got, fmt.Errorf("%w: the database is at version %d: down goes to an older version, not %d", ErrBadTarget, got, version)
	}
	m, err := Migrator(ctx, t)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	if err := m.Migrate(version); err != nil {
		now, nowDirty, _ := m.Version()
		if nowDirty {
			// golang-migrate records the version a step goes to, dirty,
			// before it runs the file: the failed down file is the next one's.
			return now, fmt.Errorf("migrate down to %d: %w; version %d is now recorded dirty: %s", version, brief(err), now, repairAdvice(t, now, false, true))
		}
		return now, fmt.Errorf("migrate down to %d: %w", version, brief(err))
	}
	return version, nil
}

// known refuses a version this binary's migrations do not hold.
func known(t Target, version uint) error {
	vs, err := versionsOf(t)
	if err != nil {
		return err
	}
	if !slices.Contains(vs, version) {
		return fmt.Errorf("%w: this binary's %s migrations are versions %d to %d, not %d", ErrBadTarget, t.Name(), vs[0], vs[len(vs)-1], version)
	}
	return nil
}

func versionsOf(t Target) ([]uint, error) {
	s, err := schemaOf(t)
	if err != nil {
		return nil, err
	}
	vs, err := Versions(s.Files)
	if err == nil && len(vs) == 0 {
		err = errors.New("migrations: none embedded")
	}
	return vs, err
}

// dirtyError refuses a database whose version v is recorded dirty: an
// ErrSchemaMismatch, final (a worker that retries meets it again), saying how
// to leave it.
func dirtyError(t Target, v uint) error {
	return fmt.Errorf("%w: the database's schema version %d is dirty (a migration failed half way): %s", ErrSchemaMismatch, v, dirtyAdvice(t, v))
}

// dirtyAdvice says how to leave a dirty version v when the command that
// failed is not known here: golang-migrate records the version a step goes
// to, dirty, before it runs the file, so after `migrate up` the failed file is
// v's up, after `migrate down` the down of the version after v.
func dirtyAdvice(t Target, v uint) string {
	return repairAdvice(t, v, true, true)
}

// repairAdvice is dirtyAdvice for the failed command's direction(s).
func repairAdvice(t Target, v uint, up, down bool) string {
	vs, err := versionsOf(t)
	if err != nil {
		return "repair it by hand, then record the version with `queuectl migrate force`"
	}
	if v > vs[len(vs)-1] {
		return fmt.Sprintf("version %d comes from a newer release than this binary (it knows up to %d): repair it with that release's queuectl", v, vs[len(vs)-1])
	}
	i := slices.Index(vs, v)
	var ways []string
	if up {
		before := uint(0) // no version: v is the first
		if i > 0 {
			before = vs[i-1]
		}
		way := fmt.Sprintf("record `queuectl migrate force %d` once what migration %d changed is undone, or `force %d` once it is finished by hand", before, v, v)
		if down {
			way = "if `migrate up` failed, " + way
		}
		ways = append(ways, way)
	}
	if down && i >= 0 && i+1 < len(vs) {
		way := fmt.Sprintf("record `queuectl migrate force %d` once what migration %d's down file changed is undone, or `force %d` once it is finished by hand", vs[i+1], vs[i+1], v)
		if up {
			way = "if `migrate down` failed, " + way
		}
		ways = append(ways, way)
	}
	return strings.Join(ways, "; ") + " (on PostgreSQL and SQLite a failed migration has rolled back: it is undone already); then run `queuectl migrate up`"
}

// brief shortens golang-migrate's report of a failed migration file, which
// quotes the whole file after the server's message, to the message, its
// cause and its line; errors.As still finds the original.
func brief(err error) error {
	if de := (migrate.ErrDirty{}); errors.As(err, &de) {
		return err
	}
	// Drivers return the value (PostgreSQL's) or a pointer (SQLite's).
	var dbErr database.Error
	var dbErrPtr *database.Error
	switch {
	case errors.As(err, &dbErr):
		return briefError{dbErr}
	case errors.As(err, &dbErrPtr) && dbErrPtr != nil:
		return briefError{*dbErrPtr}
	}
	return err
}

type briefError struct{ orig database.Error }

func (b briefError) Error() string {
	// Err is the server's message ("migration failed: …"), or only the step
	// that failed ("migration failed", "transaction commit failed") when the
	// cause is not the server's: a lost connection, a locked SQLite file.
	msg := strings.TrimPrefix(b.orig.Err, "migration failed: ")
	if !strings.Contains(b.orig.Err, ": ") && b.orig.OrigErr != nil {
		msg = strings.TrimSpace(msg + ": " + b.orig.OrigErr.Error())
		msg = strings.TrimPrefix(msg, ": ")
	}
	// A message without a position (a RAISE) says "(column 0)", and golang-
	// migrate then names line 1 of the file: neither means anything.
	if pos, ok := strings.CutSuffix(msg, " (column 0)"); ok {
		return pos
	}
	if b.orig.Line > 0 {
		msg += fmt.Sprintf(" (line %d of the file)", b.orig.Line)
	}
	return msg
}

func (b briefError) Unwrap() error { return b.orig }
