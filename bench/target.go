package bench

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
)

// target is one database server (or, for SQLite, a temporary directory) on which
// every scenario gets fresh databases of its own.
type target struct {
	name  string          // dialect name: postgres, sqlite or sqlserver
	base  string          // the server DSN (postgres, sqlserver) or the temp dir (sqlite)
	admin dialect.Dialect // a connection to base for CREATE/DROP DATABASE; nil for sqlite
	seq   int
}

// openTarget connects to a server, or makes the temporary directory for SQLite.
func openTarget(ctx context.Context, name, dsn string) (*target, error) {
	t := &target{name: name, base: dsn}
	if name == "sqlite" {
		dir, err := os.MkdirTemp("", "stageq-bench-")
		if err != nil {
			return nil, fmt.Errorf("sqlite temp dir: %w", err)
		}
		t.base = dir
		return t, nil
	}
	d, err := dialect.Open(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("%s server: %w", name, err)
	}
	t.admin = d
	return t, nil
}

// close drops nothing (each database has its own drop) but releases the server
// connection or removes SQLite's directory.
func (t *target) close() {
	if t.admin != nil {
		t.admin.Close()
	}
	if t.name == "sqlite" {
		os.RemoveAll(t.base)
	}
}

var unsafeName = regexp.MustCompile(`[^a-z0-9_]+`)

// createDB makes an empty database for one scenario and returns its DSN and the
// function that drops it.
func (t *target) createDB(ctx context.Context, tag string) (string, func(), error) {
	t.seq++
	tag = unsafeName.ReplaceAllString(strings.ToLower(tag), "_")
	switch t.name {
	case "sqlite":
		dir := filepath.Join(t.base, fmt.Sprintf("%02d_%s", t.seq, tag))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", nil, fmt.Errorf("sqlite dir: %w", err)
		}
		// sqlite:// + an absolute path gives the sqlite:///abs form.
		return "sqlite://" + filepath.Join(dir, "bench.db"), func() { os.RemoveAll(dir) }, nil
	case "postgres":
		name := fmt.Sprintf("stageq_bench_%d_%02d_%s_%04x", os.Getpid(), t.seq, tag, rand.IntN(1<<16))
		if _, err := t.admin.DB().ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
			return "", nil, fmt.Errorf("create database %s: %w", name, err)
		}
		u, err := url.Parse(t.base)
		if err != nil {
			return "", nil, fmt.Errorf("postgres dsn: %w", err)
		}
		u.Path = "/" + name
		drop := func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			t.admin.DB().ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		}
		return u.String(), drop, nil
	case "sqlserver":
		name := fmt.Sprintf("stageq_bench_%d_%02d_%s", os.Getpid(), t.seq, tag)
		if _, err := t.admin.DB().ExecContext(ctx, "CREATE DATABASE ["+name+"]"); err != nil {
			return "", nil, fmt.Errorf("create database %s: %w", name, err)
		}
		u, err := url.Parse(t.base)
		if err != nil {
			return "", nil, fmt.Errorf("sqlserver dsn: %w", err)
		}
		q := u.Query()
		q.Set("database", name)
		u.RawQuery = q.Encode()
		drop := func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			t.admin.DB().ExecContext(ctx, "ALTER DATABASE ["+name+"] SET SINGLE_USER WITH ROLLBACK IMMEDIATE")
			t.admin.DB().ExecContext(ctx, "DROP DATABASE ["+name+"]")
		}
		return u.String(), drop, nil
	}
	return "", nil, fmt.Errorf("bench: no database factory for dialect %q", t.name)
}

// dbName is the database (or file) a DSN names, for pg_stat_database.
func dbName(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}

// migrated creates a database and opens a migrated client on it.
func (t *target) migrated(ctx context.Context, tag string) (string, *queue.Client, func(), error) {
	dsn, drop, err := t.createDB(ctx, tag)
	if err != nil {
		return "", nil, nil, err
	}
	c, err := queue.Open(ctx, dsn, queue.Config{Migrate: true, Logger: zerolog.Nop()})
	if err != nil {
		drop()
		return "", nil, nil, fmt.Errorf("open and migrate %s: %w", dialect.Redact(dsn), err)
	}
	return dsn, c, func() { c.Close(); drop() }, nil
}

// Bench-only SQL: fill the queue without the API, and read the Logs trail's
// timings on the database's clock. The queue itself never runs these.
const (
	// pgFill inserts $3 tasks of process $1 at order $2 in state $4.
	pgFill = `INSERT INTO stageq.tasks (process_id, execution_order, kind, body, state, run_at)
SELECT $1, $2, 'noop', 'noop', $4, now() - interval '1 hour' FROM generate_series(1, $3)`
	// sqliteFill is pgFill with a recursive CTE for generate_series.
	sqliteFill = `WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < ?3)
INSERT INTO stageq_tasks (process_id, execution_order, kind, body, state, run_at)
SELECT ?1, ?2, 'noop', 'noop', ?4, strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hour') FROM g`
	// pgLogSpan: succeeded attempts of the processes whose names start with
	// $1 and the seconds from the first start to the last end.
	pgLogSpan = `SELECT count(*), coalesce(extract(epoch FROM max(ended_at) - min(started_at)), 0)::float8
FROM stageq.logs WHERE process_name LIKE $1 || '%' AND outcome = 'succeeded'`
	sqliteLogSpan = `SELECT count(*), coalesce((julianday(max(ended_at)) - julianday(min(started_at))) * 86400.0, 0)
FROM stageq_logs WHERE process_name LIKE ?1 || '%' AND outcome = 'succeeded'`
	sqlserverLogSpan = `SELECT count(*), coalesce(DATEDIFF_BIG(microsecond, min(started_at), max(ended_at)) / 1e6, 0)
FROM stageq.Logs WHERE process_name LIKE @p1 + '%' AND outcome = 'succeeded'`
)

// fill inserts n tasks in bulk (bench setup only: the depth scenario needs a
// million rows in seconds, which no API is for).
func fill(ctx context.Context, d dialect.Dialect, processID int64, order, n int, state string) error {
	var q string
	switch d.Name() {
	case "postgres":
		q = pgFill
	case "sqlite":
		q = sqliteFill
	default:
		return fmt.Errorf("bench: no bulk fill for %s", d.Name())
	}
	if _, err := d.DB().ExecContext(ctx, q, processID, order, n, state); err != nil {
		return fmt.Errorf("fill %d %s tasks: %w", n, state, err)
	}
	if _, err := d.DB().ExecContext(ctx, "ANALYZE"); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	return nil
}

// logSpan counts the succeeded attempts of the processes whose names start with
// prefix (the bench's names hold no LIKE wildcard but '_', which matches itself
// too) and the database-clock time from the first start to the last end.
func logSpan(ctx context.Context, db *sql.DB, dialectName, prefix string) (int, time.Duration, error) {
	q := map[string]string{"postgres": pgLogSpan, "sqlite": sqliteLogSpan, "sqlserver": sqlserverLogSpan}[dialectName]
	var n int
	var secs float64
	if err := db.QueryRowContext(ctx, q, prefix).Scan(&n, &secs); err != nil {
		return 0, 0, fmt.Errorf("read Logs span of %s*: %w", prefix, err)
	}
	return n, time.Duration(secs * float64(time.Second)), nil
}
