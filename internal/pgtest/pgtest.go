// Package pgtest gives a test a PostgreSQL database of its own, so that test
// runs, and tests within a run, never share one. The conformance suite, the
// dashboard's and queuectl's tests and the dialect's benchmarks make theirs
// here (the benchmark command, bench/, makes its own, with its own settings).
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
	admin, err := sql.Open("pgx", base)
	if err != nil {
		tb.Fatalf("postgres: %v", err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		tb.Fatalf("PostgreSQL is not reachable at %s (set STAGEQ_POSTGRES_DSN, or start it: "+
			"pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start): %v", dialect.Redact(base), err)
	}
	name := fmt.Sprintf("%s_%d_%08x", prefix, os.Getpid(), rand.Uint32())
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		if a, err := sql.Open("pgx", base); err == nil {
			a.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
			a.Close()
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("STAGEQ_POSTGRES_DSN: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}
