// Package sqlite is stageq's embedded dialect (modernc.org/sqlite, pure Go): the
// default that needs no server.
//
// SQLite serialises writers, so there are no row locks to skip: every write
// transaction starts with BEGIN IMMEDIATE (the DSN's _txlock), which takes the
// database's write lock up front so a transaction never fails half way trying to
// upgrade from reader to writer. WAL mode lets readers go on meanwhile, and
// busy_timeout makes writers of other processes wait their turn instead of failing.
// The stage barrier is kept by openStage (stage.go), run under that lock.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/dialect/sqlbase"
	schema "github.com/stageq/stageq/migrations/sqlite"
)

func init() {
	dialect.Register("sqlite", Open)
	registerFunctions()
}

// SQLite implements dialect.Dialect.
type SQLite struct {
	// Base is the Go shared with the other dialects around the statements
	// of operate.go, read.go, limits.go, prune.go, schedule.go and
	// exclusive_lease.go (base.go).
	sqlbase.Base
	db     *sql.DB // the queue's own statements: one connection (see Open)
	bodies *sql.DB // DB(): task bodies, migrations and the caller's own use
	path   string
	abs    string // path made absolute, for Where
	// migrations are the embedded ones, or another release's (UseRelease).
	migrations fs.FS
	// dsn is what the pools were opened with, for golang-migrate's pool of
	// its own (schema.go).
	dsn string

	// stmts maps the text of each queue statement to its statement prepared
	// once on db (stmt.go): modernc.org/sqlite otherwise parses and plans the
	// SQL again on every call.
	stmtMu sync.RWMutex
	stmts  map[string]*sql.Stmt

	holds writeHolds // atomic bodies holding the write lock (atomic.go)
}

// walSizeLimit is the size SQLite cuts a larger WAL file back to when the log
// starts over: four times the default auto-checkpoint's 1,000 pages of 4 KiB.
const walSizeLimit = 16 << 20

// Open opens (creating if missing) the database file named by the DSN:
// sqlite://stageq.db (relative to the working directory), sqlite:///var/lib/stageq.db
// (absolute). Query parameters are passed to the driver.
func Open(ctx context.Context, dsn string) (dialect.Dialect, error) {
	path, query, err := parseDSN(dsn)
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	// The pragmas every stageq connection starts with. One the DSN sets itself
	// (?_pragma=busy_timeout(5000)) replaces stageq's of that name: the driver
	// runs the _pragma values sorted, so with both given whichever sorted last
	// would win. The two the queue needs can only be named with their values.
	set := map[string]bool{}
	for _, v := range q["_pragma"] {
		name := pragmaName(v)
		if allowed, ok := requiredPragmas[name]; ok && !slices.Contains(allowed, strings.ToUpper(pragmaValue(v))) {
			return nil, fmt.Errorf("%w: sqlite DSN: _pragma=%s: stageq needs %s = %s", dialect.ErrBadDSN, v, name, allowed[0])
		}
		set[name] = true
	}
	for _, v := range []string{
		"busy_timeout(30000)",
		"journal_mode(WAL)",
		"synchronous(NORMAL)",
		// A large transaction (a submission of a million tasks) grows the WAL
		// file far past the 4 MiB at which checkpoints run, and SQLite keeps
		// the file at that size: it writes the next frames over the old ones.
		// Claims and finishes then ran about a quarter slower and by fits
		// (claim p50 100-190 µs against 100-120 µs, 10,000 tasks beside a
		// million blocked, in the bench's depth scenario), and the disk stayed
		// taken. With a limit, the first write after a checkpoint has copied
		// the whole log back (when the log starts over) cuts the file to it.
		fmt.Sprintf("journal_size_limit(%d)", walSizeLimit),
		"foreign_keys(ON)",
	} {
		if !set[pragmaName(v)] {
			q.Add("_pragma", v)
		}
	}
	q.Set("_txlock", "immediate")
	dsnFile := "file:" + path + "?" + q.Encode()
	open := func() (*sql.DB, error) {
		db, err := sql.Open("sqlite", dsnFile)
		if err != nil {
			return nil, fmt.Errorf("open sqlite %s: %w", path, err)
		}
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, fmt.Errorf("open sqlite %s: %w", path, err)
		}
		return db, nil
	}
	queue, err := open()
	if err != nil {
		return nil, err
	}
	// One connection for the queue's own statements: SQLite runs one writer at
	// a time anyway, and this process's writers then wait their turn in Go's
	// pool, woken at once, instead of in SQLite's busy handler, which sleeps up
	// to 100ms between tries. Other processes still meet busy_timeout.
	queue.SetMaxOpenConns(1)
	bodies, err := open()
	if err != nil {
		queue.Close()
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	s := &SQLite{db: queue, bodies: bodies, path: path, abs: abs, stmts: map[string]*sql.Stmt{}, migrations: schema.Files, dsn: dsnFile}
	s.Base = s.base()
	return s, nil
}

// requiredPragmas are the pragmas the queue needs, with the values a DSN may
// give them: WAL, so that readers (bodies, dashboards) never block the one
// writer nor wait for it; foreign keys, whose cascade deletes a schedule's
// runs with the schedule.
var requiredPragmas = map[string][]string{
	"journal_mode": {"WAL"},
	"foreign_keys": {"ON", "1", "TRUE", "YES"},
}

// pragmaName is the name a _pragma value sets: busy_timeout for
// busy_timeout(30000) or busy_timeout=30000.
func pragmaName(v string) string {
	name, _, _ := strings.Cut(v, "(")
	name, _, _ = strings.Cut(name, "=")
	return strings.ToLower(strings.TrimSpace(name))
}

// pragmaValue is the value a _pragma value sets: 30000 for busy_timeout(30000)
// or busy_timeout=30000; "" when it sets none (a read).
func pragmaValue(v string) string {
	if _, val, ok := strings.Cut(v, "("); ok {
		return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(val), ")"))
	}
	_, val, _ := strings.Cut(v, "=")
	return strings.TrimSpace(val)
}

// parseDSN splits sqlite://path?params. Both sqlite://rel/file.db and
// sqlite:///abs/file.db are accepted.
func parseDSN(dsn string) (string, url.Values, error) {
	rest, ok := strings.CutPrefix(dsn, "sqlite://")
	if !ok {
		return "", nil, fmt.Errorf("%w: sqlite DSN %q must start with sqlite://", dialect.ErrBadDSN, dialect.Redact(dsn))
	}
	path, rawQuery, _ := strings.Cut(rest, "?")
	if path == "" {
		return "", nil, fmt.Errorf("%w: sqlite DSN %q names no file (for example sqlite://stageq.db)", dialect.ErrBadDSN, dialect.Redact(dsn))
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", nil, fmt.Errorf("%w: sqlite DSN %q: %v", dialect.ErrBadDSN, dialect.Redact(dsn), err)
	}
	return path, q, nil
}

// Name implements dialect.Dialect.
func (s *SQLite) Name() string { return "sqlite" }

// Where implements dialect.Dialect: the file, made absolute as it was when
// opened.
func (s *SQLite) Where() string { return "sqlite file " + s.abs }

// DB implements dialect.Dialect.
func (s *SQLite) DB() *sql.DB { return s.bodies }

// BeginTx implements dialect.Dialect: BEGIN IMMEDIATE, through the DSN's _txlock.
func (s *SQLite) BeginTx(ctx context.Context) (*sql.Tx, error) {
	return sqlbase.BeginTx(ctx, s.db, mapErr)
}

// Close implements dialect.Dialect.
func (s *SQLite) Close() error {
	s.stmtMu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmts = map[string]*sql.Stmt{}
	s.stmtMu.Unlock()
	return errors.Join(s.db.Close(), s.bodies.Close())
}

// inTx runs fn in the caller's transaction tx, or (tx nil) in a new one. fn
// gets a txQuerier (stmt.go). Statements a new transaction met that were not
// cached yet are prepared on s.db once it has ended and given the connection
// back. A caller's transaction uses no cached statement (it may be another
// handle's) and caches none: it still holds the connection when fn returns.
func (s *SQLite) inTx(ctx context.Context, tx *sql.Tx, fn func(dialect.Querier) error) error {
	if tx != nil {
		tq := &txQuerier{s: s, tx: tx}
		defer tq.close()
		return fn(tq)
	}
	tx, err := s.BeginTx(ctx)
	if err != nil {
		return err
	}
	tq := &txQuerier{s: s, tx: tx, cached: true}
	err = fn(tq)
	if err != nil {
		tx.Rollback()
	} else if err = tx.Commit(); err != nil {
		err = fmt.Errorf("commit: %w", mapErr(err))
	}
	s.prepareMissed(ctx, tq.missed) // the transaction has given the connection back
	return err
}

// mapErr turns constraint violations into dialect.ErrInvalid.
func mapErr(err error) error {
	var se *msqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT {
		return fmt.Errorf("%w: %s", dialect.ErrInvalid, se.Error())
	}
	return err
}
