package migrations

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/golang-migrate/migrate/v4/database"
)

// ErrBadTarget: Force or Down was given a version they cannot go to (one this
// binary holds no migration for, or for Down one not older); nothing changed.
var ErrBadTarget = errors.New("bad target version")

// Force records version as the database's schema version, clean, without
// running any migration: the way out of a dirty version once the operator has
// finished the failed migration by hand (force its version) or undone it
// (force the one before). Only versions this binary's files hold are taken,
// so the record always names a step some migration describes.
func Force(ctx context.Context, t Target, version uint) error {
	if err := known(t, version); err != nil {
		return err
	}
	m, err := Migrator(ctx, t)
	if err != nil {
		return err
	}
	// Not m.Close(): some of golang-migrate's drivers (SQLite's) close the
	// *sql.DB they were given, which belongs to the caller.
	if err := m.Force(int(version)); err != nil {
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
	m, err := Migrator(ctx, t)
	if err != nil {
		return 0, err
	}
	got, dirty, err := m.Version()
	if err != nil {
		return 0, fmt.Errorf("migrate: read version: %w", err)
	}
	switch {
	case dirty:
		return got, fmt.Errorf("%w: version %d is dirty (a migration failed half way): %s", ErrSchemaMismatch, got, dirtyAdvice(t, got))
	case version >= got:
		return got, fmt.Errorf("%w: the database is at version %d: down goes to an older version, not %d", ErrBadTarget, got, version)
	}
	if err := m.Migrate(version); err != nil {
		now, nowDirty, _ := m.Version()
		if nowDirty {
			// The failed step went down from the version after now.
			from := fmt.Sprint(neighbour(t, now, +1))
			return now, fmt.Errorf("migrate down to %d: %w; version %d is now recorded dirty: where the failed down file changed nothing (a refusal), `queuectl migrate force %s` puts the record back", version, brief(err), now, from)
		}
		return now, fmt.Errorf("migrate down to %d: %w", version, brief(err))
	}
	return version, nil
}

// known refuses a version this binary's migrations do not hold.
func known(t Target, version uint) error {
	s, err := schemaOf(t)
	if err != nil {
		return err
	}
	vs, err := Versions(s.Files)
	if err != nil {
		return err
	}
	if !slices.Contains(vs, version) {
		return fmt.Errorf("%w: this binary's %s migrations are versions %d to %d, not %d", ErrBadTarget, t.Name(), vs[0], vs[len(vs)-1], version)
	}
	return nil
}

// dirtyAdvice says how to leave a dirty version v: golang-migrate records the
// version a migration goes to, dirty, before it runs the file, so v is the
// migration that failed, and the one before it is where undoing it returns.
func dirtyAdvice(t Target, v uint) string {
	before := neighbour(t, v, -1)
	if before == v { // the first migration: undone, there is no stageq schema to record
		return fmt.Sprintf("finish migration %d by hand, record it with `queuectl migrate force %d`, and run `queuectl migrate up`", v, v)
	}
	return fmt.Sprintf("finish or undo migration %d by hand, then record which with `queuectl migrate force %d` (finished) or `queuectl migrate force %d` (undone), and run `queuectl migrate up`", v, v, before)
}

// neighbour is the version next to v in t's migrations (step -1 the one
// before, +1 the one after); v itself when there is none.
func neighbour(t Target, v uint, step int) uint {
	s, err := schemaOf(t)
	if err != nil {
		return v
	}
	vs, err := Versions(s.Files)
	if err != nil {
		return v
	}
	if i := slices.Index(vs, v) + step; slices.Contains(vs, v) && i >= 0 && i < len(vs) {
		return vs[i]
	}
	return v
}

// brief shortens golang-migrate's report of a failed migration file, which
// quotes the whole file after the server's message, to the message and its
// line; errors.As still finds the original.
func brief(err error) error {
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
	msg := b.orig.Err
	if msg == "" && b.orig.OrigErr != nil {
		msg = b.orig.OrigErr.Error()
	}
	if b.orig.Line > 0 {
		msg += fmt.Sprintf(" (line %d of the file)", b.orig.Line)
	}
	return msg
}

func (b briefError) Unwrap() error { return b.orig }
