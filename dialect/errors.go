package dialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
)

// Sentinel errors that every dialect maps its own driver errors onto, so the core
// never inspects a driver error code.
var (
	// ErrLeaseLost means the task is no longer held with the given lease token: its
	// lease expired and it was rescued, or an operator changed it. The caller's
	// result is discarded and nothing was changed.
	ErrLeaseLost = errors.New("lease lost: no longer held with this token")

	// ErrNotFound means the named process, task or worker does not exist.
	ErrNotFound = errors.New("not found")

	// ErrInvalid means the database refused the input as invalid (a CHECK constraint
	// or a validation inside a stored routine).
	ErrInvalid = errors.New("invalid input")

	// ErrUnknownScheme means no dialect is registered for the DSN's scheme.
	ErrUnknownScheme = errors.New("unknown DSN scheme")

	// ErrConnUnavailable means no database connection could be opened: the
	// server refused it (no connection slot left, starting up or shutting
	// down, the role or database refused) or could not be reached. Nothing
	// was sent on it, so nothing ran.
	ErrConnUnavailable = errors.New("no database connection could be opened")

	// ErrBodyEndedTx means an atomic task's SQL body ended the transaction
	// that was to record its completion with it (a COMMIT or ROLLBACK of its
	// own), or on SQL Server left one open. It would do so again on every
	// attempt, and on PostgreSQL and SQLite what it did before its COMMIT is
	// committed already: the task is failed, not run again.
	ErrBodyEndedTx = errors.New("an atomic task's body ended the task's transaction (a COMMIT or ROLLBACK of its own): " +
		"what it did before that may be committed, and the task is not run again")
)

// ConnLost reports whether err says the database connection itself failed —
// closed by the server (SQLSTATE 57P01 admin shutdown, 57P02, 57P03, the
// session timeouts 57P05 idle, 25P03 idle in a transaction and 25P04
// transaction, class 08;
// SQL Server: an error of severity 20 or more, such as a session ended by KILL),
// reset, broken, or ended mid-answer — rather than the statement being refused.
// A statement that failed so may or may not have run; a connection that failed
// so must not be used again.
func ConnLost(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED) {
		return true
	}
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		code := st.SQLState()
		switch code {
		case "57P01", "57P02", "57P03", "57P05", "25P03", "25P04":
			return true
		}
		return strings.HasPrefix(code, "08")
	}
	// SQL Server (go-mssqldb's mssql.Error, also inside its ServerError): severity
	// 20 to 24 are fatal errors; the Database Engine task running the batch no
	// longer runs and in most cases the connection ends too. A session another one
	// ended with KILL gets such an error when the driver reads the answer before
	// the closed socket; go-mssqldb itself keeps using the connection until its
	// next request fails. The driver reports only the last error of a response at
	// the top level: the fatal one, which ends the response.
	// https://learn.microsoft.com/sql/relational-databases/errors-events/database-engine-error-severities
	var sev interface{ SQLErrorClass() uint8 }
	if errors.As(err, &sev) && sev.SQLErrorClass() >= 20 {
		return true
	}
	// pgx reports a connection it already closed this way.
	return strings.Contains(err.Error(), "conn closed")
}

// Unreachable reports whether err is what a restart or an outage of the
// database looks like to a client: a connection it dropped (ConnLost), or none
// to be had (ErrConnUnavailable, a refused or failed dial, a name that did not
// resolve, a connection attempt that ran out of time: a server that hangs or a
// network that drops packets). A client that only reads, waiting for
// something, may try again; it must ask its own context first, since that
// ending looks the same.
func Unreachable(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return ConnLost(err) || errors.Is(err, ErrConnUnavailable) || errors.Is(err, syscall.ECONNREFUSED) ||
		(errors.As(err, &op) && op.Op == "dial") || errors.As(err, &dns) || errors.Is(err, context.DeadlineExceeded)
}

// RoutineMissing reports whether err says a statement called a routine the
// database lacks: PostgreSQL's invalid_schema_name (3F000, the version's
// schema is gone) or undefined_function (42883); SQL Server's 2812 (no such
// stored procedure) or 208 (invalid object name), not seen raised here. The
// drivers' errors are read through the methods they implement, so this
// package links no driver.
func RoutineMissing(err error) bool {
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		code := st.SQLState()
		return code == "3F000" || code == "42883"
	}
	var num interface{ SQLErrorNumber() int32 }
	if errors.As(err, &num) {
		n := num.SQLErrorNumber()
		return n == 2812 || n == 208
	}
	return false
}

// DiscardConn makes the pool close conn when it is given back, instead of
// handing it to the next caller: for a connection ConnLost condemned.
func DiscardConn(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
}

// NoConn wraps the error of taking a connection from a pool (sql.DB.Conn),
// which fails only when a new one could not be opened or ctx ended first: the
// first is ErrConnUnavailable, the second stays ctx's error.
func NoConn(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w: %w", what, ErrConnUnavailable, err)
}
