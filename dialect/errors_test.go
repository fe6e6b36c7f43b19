package dialect_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	mssql "github.com/microsoft/go-mssqldb"

	"github.com/stageq/stageq/dialect"
)

// TestConnLostSQLServerSeverity: SQL Server errors of severity 20 and above are
// fatal, and the connection usually ends with them (Database Engine error
// severities, learn.microsoft.com/sql/relational-databases/errors-events/
// database-engine-error-severities); a session ended by KILL gets one. Errors a
// user can correct (11-16) and resource errors (17-19) leave the connection.
func TestConnLostSQLServerSeverity(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"severity 20", mssql.Error{Number: 50996, Class: 20, Message: "a fatal error in the current task"}, true},
		{"severity 21, wrapped", fmt.Errorf("run the body: %w", mssql.Error{Number: 50999, Class: 21, Message: "a fatal error"}), true},
		{"severity 16", mssql.Error{Number: 50004, Class: 16, Message: "stageq: bad input"}, false},
		{"deadlock victim, 13", mssql.Error{Number: 1205, Class: 13, Message: "deadlock victim"}, false},
		{"severity 19", mssql.Error{Number: 50997, Class: 19, Message: "a limit was exceeded"}, false},
		{"permission denied, 14", mssql.Error{Number: 50998, Class: 14, Message: "permission denied"}, false},
	}
	for _, c := range cases {
		if got := dialect.ConnLost(c.err); got != c.want {
			t.Errorf("%s: ConnLost(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
	if dialect.ConnLost(errors.New("plain")) {
		t.Error("a plain error counts as a lost connection")
	}
}

// TestConnLostPostgresCodes: the SQLSTATEs of a session the server ended
// count as a lost connection, the idle-session timeouts included (a server
// with idle_session_timeout set ends pooled connections between statements);
// a statement refused on a live connection does not.
func TestConnLostPostgresCodes(t *testing.T) {
	for code, want := range map[string]bool{
		"57P01": true, "57P02": true, "57P03": true, "57P05": true, "25P03": true, "25P04": true, "08006": true,
		"57014": false, // query_canceled: the statement, not the session
		"40001": false, "23505": false, "P0001": false,
	} {
		err := fmt.Errorf("claim: %w", &pgconn.PgError{Severity: "FATAL", Code: code})
		if got := dialect.ConnLost(err); got != want {
			t.Errorf("SQLSTATE %s: ConnLost = %v, want %v", code, got, want)
		}
	}
}

// TestRoutineMissing: the errors of a call to a routine the database lacks,
// and no other, say so (a worker then checks its routine version).
func TestRoutineMissing(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"schema gone", &pgconn.PgError{Code: "3F000"}, true},
		{"function gone, wrapped", fmt.Errorf("claim: %w", &pgconn.PgError{Code: "42883"}), true},
		{"connection refused", &pgconn.PgError{Code: "57P03"}, false},
		{"bad input", &pgconn.PgError{Code: "22023"}, false},
		{"no such procedure", mssql.Error{Number: 2812, Class: 16}, true},
		{"invalid object name", fmt.Errorf("claim: %w", mssql.Error{Number: 208, Class: 16}), true},
		{"deadlock victim", mssql.Error{Number: 1205, Class: 13}, false},
		{"plain", errors.New("routine missing"), false},
	}
	for _, c := range cases {
		if got := dialect.RoutineMissing(c.err); got != c.want {
			t.Errorf("%s: RoutineMissing(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// TestConnectFailedHintsAtTheBoundOnlyOnATimeout: a first connection that
// ran out of time says how long it was allowed and how to change that; one
// refused (nothing listening, no such database) does not, since more time
// would not help.
func TestConnectFailedHintsAtTheBoundOnlyOnATimeout(t *testing.T) {
	const dsn = "postgres://u:secret@db:5432/q"
	for text, hint := range map[string]bool{
		"failed to connect to `user=u database=q`: dial error (timeout: dial tcp 10.0.0.1:5432: i/o timeout)": true,
		"context deadline exceeded": true,
		"failed to connect to `user=u database=q`: 127.0.0.1:5432 (db): dial error: dial tcp 127.0.0.1:5432: connect: connection refused": false,
		`FATAL: database "q" does not exist (SQLSTATE 3D000)`:                                                                             false,
	} {
		err := dialect.ConnectFailed("postgres", dsn, 10*time.Second, errors.New(text))
		if got := strings.Contains(err.Error(), "each attempt is bounded by 10s"); got != hint {
			t.Errorf("%q: %v; want the bound named: %v", text, err, hint)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%v shows the password", err)
		}
	}
}
