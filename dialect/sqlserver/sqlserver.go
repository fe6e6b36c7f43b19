// Package sqlserver is stageq's SQL Server dialect (github.com/microsoft/go-mssqldb,
// driver name "sqlserver"). DSN: sqlserver://user:password@host:1433?database=name.
//
// The stage barrier, the fair claim and the limits live in the procedures of
// routines/sqlserver (Claim, Submit, FinishMany, Finish, Advance, Rescue,
// OpenStage, Configure, Enqueue), installed per version into schema
// stageq_r<N> and called there (routines.go). As on PostgreSQL, a
// completion does not move its process to the next stage: StagesAdvance does,
// after the completion committed, so that finishing a task locks no shared row. Every statement this package sends is a named constant directly
// above the method that runs it, listed in statements.go and checked by
// statements_test.go: each parameter is copied into a local variable of the
// column's exact type and size, so the parameter declaration the driver sends is
// the same on every call and SQL Server keeps one plan per statement.
//
// None of this has been run against a real SQL Server yet: see docs/sqlserver.md.
package sqlserver

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/microsoft/go-mssqldb/msdsn"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/dialect/sqlbase"
	schema "github.com/stageq/stageq/migrations/sqlserver"
)

func init() {
	dialect.Register("sqlserver", Open)
}

// SQLServer implements dialect.Dialect and dialect.Scheduler.
type SQLServer struct {
	db *sql.DB
	// bodies is a pool of its own for SQL bodies (BodyConn): a body's session
	// may keep the attempt's CONTEXT_INFO tag after the body ends (whether the
	// driver's connection reset clears it is unverified), and the rescue of that
	// attempt's lease KILLs whatever the tagged session runs; here that is only
	// ever a later body, which tags the session anew first.
	bodies *sql.DB
	// calls are the statements that call the routines, rendered for the
	// version this binary was built with (or OpenRelease's).
	calls *dialect.RoutineCalls
	// migrations are the embedded ones, or another release's (UseRelease).
	migrations fs.FS
	// connector makes connections like the pools', for golang-migrate's
	// pool of its own (schema.go).
	connector driver.Connector
	// cfg is the parsed DSN, for Where.
	cfg msdsn.Config
	// Base runs the operator actions, reads and exclusive leases (base.go).
	sqlbase.Base
}

var (
	_ dialect.Dialect       = (*SQLServer)(nil)
	_ dialect.Scheduler     = (*SQLServer)(nil)
	_ dialect.BatchFinisher = (*SQLServer)(nil)
	_ dialect.StageAdvancer = (*SQLServer)(nil)
)

// appName shows up as program_name in sys.dm_exec_sessions, so a DBA can tell the
// queue's sessions from the application's.
const appName = "stageq"

// Open connects to the DSN and checks that the server answers, retrying the
// documented transient login errors (a database that is failing over, a busy
// service) with backoff for at most the connect timeout.
func Open(ctx context.Context, dsn string) (dialect.Dialect, error) {
	cfg, err := msdsn.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: parse sqlserver DSN %s (want sqlserver://user:password@host:1433?database=name): %s",
			dialect.ErrBadDSN, redactDSN(dsn), scrub(err.Error(), dsn))
	}
	// Without "connection timeout" the login phase has no bound: a server that
	// accepts TCP and never answers would hang the connect. The bound applies to
	// the login only (connect.go: go-mssqldb would apply it to every read).
	bound := cfg.ConnTimeout
	if _, set := cfg.Parameters[msdsn.ConnectionTimeout]; !set && bound == 0 {
		bound = dialect.DefaultConnectTimeout
	}
	if cfg.AppName == "" {
		cfg.AppName = appName
	}
	db := sql.OpenDB(newLoginBound(cfg, bound))
	db.SetMaxIdleConns(16)
	// Connects on first use: a worker without SQL bodies never opens one.
	bodies := sql.OpenDB(newLoginBound(cfg, bound))
	bodies.SetMaxIdleConns(16)
	d := &SQLServer{db: db, bodies: bodies, calls: newCalls(Routines()), migrations: schema.Files,
		connector: newLoginBound(cfg, bound), cfg: cfg}
	d.Base = d.newBase()
	// The transient login errors are retried, within one connect timeout in
	// all: retrying each attempt to its own bound took 56 s against a server
	// that never answers. A worker retries its start by itself.
	pctx, cancel := context.WithTimeout(ctx, bound)
	err = d.retry(pctx, retryAll, func(ctx context.Context) error { return db.PingContext(ctx) })
	cancel()
	if err != nil {
		d.Close()
		return nil, dialect.ConnectFailed("sqlserver", redactDSN(dsn), bound, dialect.Scrubbed(err, scrub(err.Error(), dsn)))
	}
	if err := d.checkCompatibility(ctx); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// compatLevelSQL reads the current database's compatibility level, for the
// message when OPENJSON is refused. No parameters.
const compatLevelSQL = `
SET NOCOUNT ON;
SELECT CONVERT(int, d.compatibility_level), DB_NAME() FROM sys.databases AS d WHERE d.database_id = DB_ID();`

// openJSONProbeSQL uses OPENJSON, which stageq.Submit and the schedules need and
// which SQL Server accepts only at compatibility level 130 or higher. No parameters.
const openJSONProbeSQL = `SELECT COUNT(*) FROM OPENJSON(N'[1]');`

// minCompatLevel is the lowest compatibility level at which OPENJSON exists.
const minCompatLevel = 130

// checkCompatibility refuses, at open (so before any migration), a database on
// which OPENJSON does not work, naming its compatibility level and the fix. The
// probe, not the level, decides: it is the level's documented effect on SQL
// Server, and engines that report another level but accept OPENJSON are not
// refused for a number.
func (d *SQLServer) checkCompatibility(ctx context.Context) error {
	var level int
	var name string
	err := d.retry(ctx, retryAll, func(ctx context.Context) error {
		return d.db.QueryRowContext(ctx, compatLevelSQL).Scan(&level, &name)
	})
	if err != nil {
		return fmt.Errorf("read the database's compatibility level: %w", mapErr(err))
	}
	var n int
	err = d.retry(ctx, retryAll, func(ctx context.Context) error {
		return d.db.QueryRowContext(ctx, openJSONProbeSQL).Scan(&n)
	})
	if err == nil {
		return nil
	}
	if classify(err) != classFinal {
		return fmt.Errorf("check OPENJSON: %w", err)
	}
	return compatError(name, level, err)
}

// compatError is the refusal checkCompatibility returns when OPENJSON fails.
func compatError(name string, level int, err error) error {
	if level < minCompatLevel {
		return fmt.Errorf("database %s has compatibility level %d; stageq needs %d or higher (SQL Server 2016+, for OPENJSON). "+
			"Raise it with ALTER DATABASE [%s] SET COMPATIBILITY_LEVEL = %d (or higher), then start again: %w",
			name, level, minCompatLevel, name, minCompatLevel, err)
	}
	return fmt.Errorf("OPENJSON does not work on database %s (compatibility level %d); stageq needs it: %w", name, level, err)
}

// Name implements dialect.Dialect.
func (d *SQLServer) Name() string { return "sqlserver" }

// Where implements dialect.Dialect.
func (d *SQLServer) Where() string { return where(d.cfg) }

// where names the database of a parsed DSN: user, server (with its instance
// and port where the DSN gives them) and database, never the password.
func where(cfg msdsn.Config) string {
	host := cfg.Host
	if cfg.Instance != "" {
		host += `\` + cfg.Instance
	}
	if cfg.Port != 0 {
		host = net.JoinHostPort(host, strconv.FormatUint(cfg.Port, 10))
	}
	return "sqlserver " + cfg.User + "@" + host + "/" + cfg.Database
}

// DB implements dialect.Dialect.
func (d *SQLServer) DB() *sql.DB { return d.db }

// Close implements dialect.Dialect.
func (d *SQLServer) Close() error { return errors.Join(d.bodies.Close(), d.db.Close()) }

// beginTxSQL runs first in every transaction BeginTx starts. It has no parameter,
// so the driver sends it as a plain batch and the setting stays for the session
// (a SET inside a parameterised batch would be undone when the batch ends).
//
// XACT_ABORT ON: any run-time error, and a client cancel (attention), rolls the
// whole transaction back instead of leaving it open with half its statements
// done. An atomic task's body therefore cannot fail half way and be committed.
const beginTxSQL = `SET XACT_ABORT ON;`

// BeginTx implements dialect.Dialect: a READ COMMITTED transaction with
// XACT_ABORT ON. Atomic tasks run their body and TaskFinish in it.
func (d *SQLServer) BeginTx(ctx context.Context) (*sql.Tx, error) {
	var tx *sql.Tx
	err := d.retry(ctx, retryAll, func(ctx context.Context) (err error) {
		tx, err = d.begin(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("begin: %w", mapErr(err))
	}
	return tx, nil
}

// begin starts BeginTx's transaction once.
func (d *SQLServer) begin(ctx context.Context) (*sql.Tx, error) {
	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, beginTxSQL); err != nil {
		tx.Rollback()
		return nil, err
	}
	return tx, nil
}

// redactDSN hides the password of a DSN, even one that does not parse as a URL
// (dialect.Redact returns those unchanged).
func redactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil {
		return dialect.Redact(u.String())
	}
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return dialect.Redact(dsn)
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		user, _, _ := strings.Cut(rest[:at], ":")
		return scheme + "://" + user + ":xxxxx" + rest[at:]
	}
	return dialect.Redact(dsn)
}

// scrub removes the DSN and its password from a driver message (URL parse errors
// quote the whole DSN).
func scrub(msg, dsn string) string {
	msg = strings.ReplaceAll(msg, dsn, redactDSN(dsn))
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	} else if _, rest, ok := strings.Cut(dsn, "://"); ok {
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
		}
	}
	return msg
}
