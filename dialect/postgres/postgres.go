// Package postgres is stageq's PostgreSQL dialect (pgx v5 through database/sql).
//
// The stage barrier lives in the routines (routines/postgres: submit, finish,
// rescue, open_stage), installed per version apart from the tables and called
// in the version's schema (routines.go); the claim is one statement in
// claim.go. Every statement is parameterised and fixed for a dialect value, so
// pgx prepares each once per connection.
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/dialect/sqlbase"
	schema "github.com/stageq/stageq/migrations/postgres"
)

func init() {
	dialect.Register("postgres", Open)
	dialect.Register("postgresql", Open)
}

// Postgres implements dialect.Dialect.
type Postgres struct {
	// Base is the Go shared with the other dialects around the statements
	// of operate.go, read.go, limits.go, prune.go, schedule.go and
	// exclusive_lease.go (base.go).
	sqlbase.Base
	db *sql.DB
	// bodies is a pool of its own for SQL bodies (BodyConn). An atomic body's
	// session keeps the attempt's name after the body ends, and the rescue of
	// that attempt's lease, should its end never be recorded, ends whatever
	// that session is running: in the shared pool it could be a claim, a
	// finish or the rescue itself (seen: the rescue terminated its own
	// session). Here a session only ever runs bodies, and each atomic body
	// renames it first.
	bodies *sql.DB
	dsn    string
	// calls are the statements that call the routines, rendered for the
	// version this binary was built with (or OpenRelease's).
	calls *dialect.RoutineCalls
	// migrations are the embedded ones, or another release's (UseRelease).
	migrations fs.FS
	// cfg is the parsed DSN, for golang-migrate's pool of its own (schema.go).
	cfg *pgx.ConnConfig
}

// Open connects to the DSN (postgres://user@host:port/db?sslmode=disable) and
// checks that the server answers.
func Open(ctx context.Context, dsn string) (dialect.Dialect, error) {
	cfg, err := pgconnConfig(dsn)
	if err != nil {
		return nil, err
	}
	// The queue's own statements ping only after 30 s: an idle worker's
	// statements are seconds apart, and pgx's default (a second) doubled its
	// load on the server. A statement that meets a closed connection fails
	// and the worker retries it.
	db := openPool(cfg, sessionSetupSQL+";\n"+readCommittedSQL, 30*time.Second)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, dialect.ConnectFailed("postgres", dsn, cfg.ConnectTimeout, dialect.Scrubbed(err, scrub(err.Error(), dsn)))
	}
	// Connects on first use: a worker without SQL bodies never opens one.
	p := &Postgres{db: db, bodies: openPool(cfg, sessionSetupSQL+";\n"+watchClientSQL, bodyPingIdle), dsn: dsn,
		calls: newCalls(Routines()), migrations: schema.Files, cfg: cfg}
	p.Base = p.base()
	return p, nil
}

// openPool opens a connection pool on cfg; connections are made on first use,
// and each runs setup (one of the session statements below) once, as it
// connects. A connection idle for longer than pingIdle is pinged before it is
// reused, and replaced if the server has closed it (a restart,
// pg_terminate_backend): a statement sent on it would fail instead.
func openPool(cfg *pgx.ConnConfig, setup string, pingIdle time.Duration) *sql.DB {
	ping := stdlib.OptionShouldPing(func(_ context.Context, p stdlib.ShouldPingParams) bool {
		return p.IdleDuration > pingIdle
	})
	db := stdlib.OpenDB(*cfg, ping, stdlib.OptionAfterConnect(func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, setup); err != nil {
			return fmt.Errorf("set up the session: %w", err)
		}
		return nil
	}))
	// Keep connections for every concurrent task body (database/sql keeps 2 by
	// default and would reconnect for each task beyond them); idle ones close
	// after a while, so a quiet worker holds few.
	db.SetMaxIdleConns(256)
	db.SetConnMaxIdleTime(time.Minute)
	return db
}

// bodyPingIdle is when a body connection is pinged before its next body. A
// body sent on a connection the server closed while it sat in the pool fails
// with the signs of a connection lost while the body ran, and is abandoned
// (charged to the task's abandon budget): whether the body ran cannot be told
// from the error. Busy, a worker reuses its body connections within
// milliseconds and pings none; one that waited longer pays a round trip, and
// only a connection closed within its last second still costs an abandon.
const bodyPingIdle = time.Second

// sessionSetupSQL sets up each of the queue's own sessions (the pool's and the
// listener's): idle_session_timeout (PostgreSQL 14 and later) is turned off
// for them. A server that ends idle sessions would otherwise cut pooled
// connections between a worker's statements, and its next claim, heartbeat
// or rescue would fail on the dead one (seen with 3 s: "terminating
// connection due to idle-session timeout", SQLSTATE 57P05), and it would cut
// the listener, which is idle by design. PostgreSQL's documentation warns
// against enforcing the timeout on pooled connections; the pools close their
// idle connections themselves after a minute (openPool).
//
// Each setting is set where the server has it (PostgreSQL 14 and later, read
// from pg_settings rather than guessed from the version, so a server that
// reports 14 without it still connects).
const sessionSetupSQL = `SELECT set_config(name, '0', false) FROM pg_settings
 WHERE name = 'idle_session_timeout'`

// readCommittedSQL, run with sessionSetupSQL on each connection of the
// queue's own pool, runs its transactions at READ COMMITTED whatever the
// database's default (default_transaction_isolation): the queue's statements
// are written for it. A claim that waited for a limit's row must count the
// running tasks in a snapshot taken after the wait, which sees what the
// holder claimed; under REPEATABLE READ it counted in the snapshot taken
// before the wait and exceeded the limit (seen: 2 tasks running under a
// limit of 1). Task bodies run on the body pool, at the database's default.
const readCommittedSQL = `SET default_transaction_isolation TO 'read committed'`

// watchClientSQL, run with sessionSetupSQL on each body connection (one
// round trip), makes the body's session check every second, while a body
// runs, that its worker is still connected (PostgreSQL 14 and later; older
// servers notice a dead client only when they next write to it), so that a
// killed worker's body ends soon even before the rescue ends it. The setting
// stays for the session.
const watchClientSQL = `SELECT set_config(name, '1000', false) FROM pg_settings
 WHERE name = 'client_connection_check_interval'`

// Name implements dialect.Dialect.
func (p *Postgres) Name() string { return "postgres" }

// Where implements dialect.Dialect.
func (p *Postgres) Where() string {
	return "postgres " + p.cfg.User + "@" + net.JoinHostPort(p.cfg.Host, strconv.Itoa(int(p.cfg.Port))) + "/" + p.cfg.Database
}

// DB implements dialect.Dialect.
func (p *Postgres) DB() *sql.DB { return p.db }

// BeginTx implements dialect.Dialect.
func (p *Postgres) BeginTx(ctx context.Context) (*sql.Tx, error) {
	return sqlbase.BeginTx(ctx, p.db, mapErr)
}

// Close implements dialect.Dialect.
func (p *Postgres) Close() error { return errors.Join(p.bodies.Close(), p.db.Close()) }

// mapErr turns PostgreSQL's error codes into stageq's sentinel errors, keeping the
// server's message: 22023 (invalid_parameter_value, raised by stageq's routines),
// 23514 (check_violation) and 22003 (numeric out of range) are bad input.
func mapErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "22023", "23514", "22003", "22P02":
			return fmt.Errorf("%w: %s", dialect.ErrInvalid, strings.TrimPrefix(pe.Message, "stageq: "))
		}
	}
	return err
}
