// Package routines installs, checks and prunes the queue logic a dialect
// keeps in its database (dialect.Routines), apart from the table schema.
//
// Version N of a dialect's routines lives in schema stageq_r<N> and is
// recorded, with the checksum of its sources, in the table stageq.routines
// (SQLite keeps its logic in Go and installs none). A binary calls only its own
// version. A rolling upgrade from N to N+1 is therefore:
//
//  1. `queuectl migrate up` with the N+1 binary: table migrations that leave
//     N's statements correct (they add, or, like PostgreSQL's version 14, take
//     away only what makes N's statements fast; the floor stays at or below N,
//     so N's workers keep running and restarting), then routines N+1
//     installed beside N, and the public entry
//     points (stageq.enqueue, stageq.submit) re-pointed to N+1;
//  2. restart the workers one at a time: each N+1 worker calls stageq_r<N+1>,
//     the N workers still running call stageq_r<N>, on the same rows;
//  3. `queuectl migrate prune-routines` once no live worker calls N.
//
// The sources are in this folder, one package per dialect (routines/postgres,
// routines/sqlserver); each dialect's SQL to install them is its own
// (dialect.RoutineSQL). SQLite's logic is Go, versioned with the binary.
package routines

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/stageq/stageq/dialect"
)

// ErrNotInstalled means the database lacks the routine version a binary calls.
var ErrNotInstalled = errors.New("routines not installed")

// ErrChecksum means the database holds the binary's routine version with other
// sources: two builds disagree on what version N is.
var ErrChecksum = errors.New("routines checksum mismatch")

// Install puts r's version into the database unless it is there, and points
// the public entry points at it when no newer version is installed. It is
// safe to run from many processes at once (one waits for the other) and to
// run again. Everything happens in one transaction: a failure leaves the
// database as it was.
func Install(ctx context.Context, db *sql.DB, r dialect.Routines) (err error) {
	sum, err := r.Checksum()
	if err != nil {
		return err
	}
	// Nearly every call finds its version there (each `worker --migrate`
	// start): look first under the shared lock, which workers starting
	// together hold at once, and which waits for a prune in progress (a prune
	// of this version then finds it gone, and it is installed again below).
	if found, err := lookupShared(ctx, db, r, sum); found || err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, readCommitted)
	if err != nil {
		return fmt.Errorf("install routines %d: %w", r.Version, err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, r.SQL.Lock); err != nil {
		return fmt.Errorf("install routines %d: lock: %w", r.Version, err)
	}
	// Again under the lock: another install may have committed meanwhile.
	found, newest, err := lookup(ctx, tx, r, sum)
	if err != nil {
		return err
	}
	if found {
		return tx.Commit()
	}
	if err := installFiles(ctx, tx, r, newest < r.Version); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, r.SQL.Record, r.SQL.Arg("pVersion", r.Version), r.SQL.Arg("pChecksum", sum)); err != nil {
		return fmt.Errorf("install routines %d: record: %w", r.Version, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("install routines %d: commit: %w", r.Version, err)
	}
	return nil
}

// readCommitted is the isolation of every transaction here, whatever the
// database's default: each statement must read what committed before it ran,
// so a read that waited for the routines lock sees what its holder did. Under
// REPEATABLE READ the snapshot would be taken by the lock statement itself,
// before the lock was granted.
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// lookupShared is lookup under the shared lock (RoutineSQL.LockShared): a
// prune or an install in progress is waited for, so what it reads stays true
// for whoever the prune counts as a caller of r's version.
func lookupShared(ctx context.Context, db *sql.DB, r dialect.Routines, sum string) (bool, error) {
	tx, err := db.BeginTx(ctx, readCommitted)
	if err != nil {
		return false, fmt.Errorf("routines %d: %w", r.Version, err)
	}
	defer tx.Rollback() // it only read
	if _, err := tx.ExecContext(ctx, r.SQL.LockShared); err != nil {
		return false, fmt.Errorf("routines %d: shared lock: %w", r.Version, err)
	}
	found, _, err := lookup(ctx, tx, r, sum)
	return found, err
}

// lookup reads the installed versions through q and looks for r's: found
// when it is there from r's sources (sum), an error when from others; newest
// is the newest version installed.
func lookup(ctx context.Context, q dialect.Querier, r dialect.Routines, sum string) (found bool, newest int, err error) {
	installed, err := list(ctx, q, r)
	if err != nil {
		return false, 0, err
	}
	for _, v := range installed {
		if v.Version == r.Version {
			if v.Checksum != sum {
				return false, 0, checksumError(r, v.Checksum, sum)
			}
			found = true
		}
		newest = max(newest, v.Version)
	}
	return found, newest, nil
}

// installFiles creates r's namespace afresh (a namespace left without its
// record, by a schema migrated down and up again, is replaced) and runs its
// sources; the entry points too when r is the newest version.
func installFiles(ctx context.Context, tx *sql.Tx, r dialect.Routines, public bool) error {
	ns := r.Namespace()
	if err := r.SQL.DropNamespace(ctx, tx, ns); err != nil {
		return fmt.Errorf("install routines %d: clear %s: %w", r.Version, ns, err)
	}
	for _, s := range r.SQL.Prepare {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("install routines %d: %w", r.Version, err)
		}
	}
	if err := r.SQL.CreateNamespace(ctx, tx, ns); err != nil {
		return fmt.Errorf("install routines %d: create %s: %w", r.Version, ns, err)
	}
	files, entries, err := r.Sources()
	if err != nil {
		return err
	}
	if public {
		files = append(files, entries...)
	}
	for _, p := range files {
		text, err := fs.ReadFile(r.Files, p)
		if err != nil {
			return fmt.Errorf("install routines %d: read %s: %w", r.Version, p, err)
		}
		if _, err := tx.ExecContext(ctx, r.Render(string(text))); err != nil {
			return fmt.Errorf("install routines %d: %s: %w", r.Version, p, err)
		}
	}
	return nil
}

// Check says whether the database holds r's version with r's sources. It
// reads under the shared lock, so it waits for a prune in progress: a worker
// that checks after it has registered (queue/register.go) either finds its
// version gone or has it kept by every later prune that counts it as a live
// caller (a heartbeat within the prune's live window).
func Check(ctx context.Context, db *sql.DB, r dialect.Routines) error {
	sum, err := r.Checksum()
	if err != nil {
		return err
	}
	if found, err := lookupShared(ctx, db, r, sum); found || err != nil {
		return err
	}
	return fmt.Errorf("%w: this binary calls routines version %d (schema %s), which the database lacks: run `queuectl migrate up` or `worker --migrate`",
		ErrNotInstalled, r.Version, r.Namespace())
}

func checksumError(r dialect.Routines, have, want string) error {
	return fmt.Errorf("%w: the database's routines version %d were installed from other sources (checksum %.12s, this binary's %.12s): "+
		"a build changed the routines without raising their version", ErrChecksum, r.Version, have, want)
}

func list(ctx context.Context, q dialect.Querier, r dialect.Routines) ([]dialect.RoutineVersion, error) {
	out, err := dialect.QueryAll(ctx, q, dialect.KeepErr, r.SQL.List, func(rows *sql.Rows, v *dialect.RoutineVersion) error {
		if err := rows.Scan(&v.Version, &v.Checksum, &v.InstalledAt); err != nil {
			return err
		}
		v.Namespace = dialect.RoutineNamespace(v.Version)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list routines: %w", err)
	}
	return out, nil
}

// List reads the installed versions, newest first, each with the number of
// live workers (a heartbeat within liveWithin) that call it.
func List(ctx context.Context, db *sql.DB, r dialect.Routines, liveWithin time.Duration) ([]dialect.RoutineVersion, error) {
	if err := checkLive(liveWithin); err != nil {
		return nil, fmt.Errorf("list routines: %w", err)
	}
	return listInUse(ctx, db, r, liveWithin)
}

// listInUse reads the installed versions, each with the number of live workers
// that call it: what List shows and what Prune decides on.
func listInUse(ctx context.Context, q dialect.Querier, r dialect.Routines, liveWithin time.Duration) ([]dialect.RoutineVersion, error) {
	out, err := list(ctx, q, r)
	if err != nil {
		return nil, err
	}
	used, err := inUse(ctx, q, r, liveWithin)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Workers = used[out[i].Version]
	}
	return out, nil
}

// checkLive refuses a live window the statements cannot use: they take whole
// milliseconds, and a window under one would count every worker dead (a prune
// would then drop the routines they call).
func checkLive(liveWithin time.Duration) error {
	if liveWithin < time.Millisecond {
		return fmt.Errorf("the live window must be at least 1ms, got %s", liveWithin)
	}
	return nil
}

func inUse(ctx context.Context, q dialect.Querier, r dialect.Routines, liveWithin time.Duration) (map[int]int, error) {
	type count struct{ version, workers int }
	counts, err := dialect.QueryAll(ctx, q, dialect.KeepErr, r.SQL.InUse, func(rows *sql.Rows, c *count) error {
		return rows.Scan(&c.version, &c.workers)
	}, r.SQL.Arg("pLiveMs", liveWithin.Milliseconds()))
	if err != nil {
		return nil, fmt.Errorf("routines in use: %w", err)
	}
	used := map[int]int{}
	for _, c := range counts {
		used[c.version] = c.workers
	}
	return used, nil
}

// Prune drops every installed version but the newest that no live worker (a
// heartbeat within liveWithin) calls, and returns the versions dropped. The
// newest stays whatever runs: the entry points call it. Only workers record
// the version they call: the caller makes sure no other process built with
// an older version (a producer using package queue, a dashboard) still runs,
// and picks liveWithin above the workers' heartbeat interval (a third of
// their lease).
func Prune(ctx context.Context, db *sql.DB, r dialect.Routines, liveWithin time.Duration) (dropped []int, err error) {
	if err := checkLive(liveWithin); err != nil {
		return nil, fmt.Errorf("prune routines: %w", err)
	}
	tx, err := db.BeginTx(ctx, readCommitted)
	if err != nil {
		return nil, fmt.Errorf("prune routines: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, r.SQL.Lock); err != nil {
		return nil, fmt.Errorf("prune routines: lock: %w", err)
	}
	installed, err := listInUse(ctx, tx, r, liveWithin)
	if err != nil {
		return nil, err
	}
	newest := 0
	for _, v := range installed {
		newest = max(newest, v.Version)
	}
	for _, v := range installed {
		if v.Version == newest || v.Workers > 0 {
			continue
		}
		if err := r.SQL.DropNamespace(ctx, tx, v.Namespace); err != nil {
			return nil, fmt.Errorf("prune routines %d: %w", v.Version, err)
		}
		if _, err := tx.ExecContext(ctx, r.SQL.Forget, r.SQL.Arg("pVersion", v.Version)); err != nil {
			return nil, fmt.Errorf("prune routines %d: %w", v.Version, err)
		}
		dropped = append(dropped, v.Version)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("prune routines: commit: %w", err)
	}
	return dropped, nil
}
