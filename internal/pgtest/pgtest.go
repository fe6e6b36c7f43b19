// Package pgtest gives a test a PostgreSQL database of its own, so that test
// runs, and tests within a run, never share one. The conformance suite, the
// dashboard's and queuectl's tests and the dialect's benchmarks make theirs
// here (the benchmark command, bench/, makes its own, with its own settings).
// Its steps that do not depend on the server, Admin and CreateDatabase, also
// make the conformance suite's SQL Server databases.
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"

	"github.com/stageq/stageq/dialect"
)

// DefaultDSN is the local test server, used when STAGEQ_POSTGRES_DSN is unset.
const DefaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Base is the server tests make their databases on: STAGEQ_POSTGRES_DSN, a
// role that may CREATE DATABASE, or DefaultDSN.
func Base() string {
	if v := os.Getenv("STAGEQ_POSTGRES_DSN"); v != "" {
		return v
	}
	return DefaultDSN
}

// NewDatabase creates an empty database named prefix_<pid>_<random> on Base,
// drops it (closing whatever still uses it) when the test ends, and returns
// its DSN. An unreachable server fails the test, saying how to start one.
func NewDatabase(tb testing.TB, prefix string) string {
	tb.Helper()
	base := Base()
	admin := Admin(tb, "pgx", base)
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		tb.Fatalf("PostgreSQL is not reachable at %s (set STAGEQ_POSTGRES_DSN, or start it: "+
			"pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start): %v", dialect.Redact(base), err)
	}
	name := CreateDatabase(ctx, tb, admin, "pgx", base, prefix, func(name string) string {
		return "DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"
	})
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("STAGEQ_POSTGRES_DSN: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// Admin opens a connection through driver to the server of base, for making
// and dropping databases, failing the test if it cannot; the caller closes it.
func Admin(tb testing.TB, driver, base string) *sql.DB {
	tb.Helper()
	admin, err := sql.Open(driver, base)
	if err != nil {
		tb.Fatalf("%s admin connection: %v", driver, err)
	}
	return admin
}

// CreateDatabase creates an empty database named prefix_<pid>_<random> through
// admin, a connection to the server of base through driver, and returns its
// name. When the test ends it runs drop(name), the statement that drops it, on
// a connection of its own (admin is closed by then).
func CreateDatabase(ctx context.Context, tb testing.TB, admin *sql.DB, driver, base, prefix string, drop func(name string) string) string {
	tb.Helper()
	name := fmt.Sprintf("%s_%d_%08x", prefix, os.Getpid(), rand.Uint32())
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		if a, err := sql.Open(driver, base); err == nil {
			a.Exec(drop(name))
			a.Close()
		}
	})
	return name
}
