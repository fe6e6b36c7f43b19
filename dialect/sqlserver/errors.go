package sqlserver

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/stageq/stageq/dialect"
)

// SQL Server error numbers this package acts on.
const (
	errDeadlockVictim  = 1205 // chosen as deadlock victim; the transaction was rolled back
	errLockTimeout     = 1222 // lock request time-out (SET LOCK_TIMEOUT)
	errLockResources   = 1204 // no lock resource available
	errCheckViolation  = 547  // CHECK or FOREIGN KEY constraint
	errNullViolation   = 515  // NULL into a NOT NULL column
	errTruncation      = 2628 // string or binary data would be truncated (2019+)
	errTruncationOld   = 8152 // the same, before SQL Server 2019
	errUniqueKey       = 2627 // PRIMARY KEY or UNIQUE constraint
	errUniqueIndex     = 2601 // unique index
	errValidationFirst = 50000
	errValidationLast  = 50999 // THROW numbers stageq's procedures use for bad input
	errBodyTranCount   = 50020 // an atomic body ended or opened a transaction
)

// rolledBack are errors after which the server has certainly not committed the
// request's work, so running it again is safe for any statement: the deadlock
// victim and lock time-outs (this package always runs with XACT_ABORT ON, which
// turns them into a rollback of the whole transaction), and the errors Azure SQL
// documents as transient that refuse a login or a request before it runs
// (Troubleshoot transient connection errors; SqlConfigurableRetryFactory's list).
var rolledBack = map[int32]bool{
	errDeadlockVictim: true, errLockTimeout: true, errLockResources: true,
	4060:  true, // cannot open database requested by the login
	4221:  true, // login to read-secondary failed (versioning transition)
	40501: true, // the service is currently busy
	40613: true, // database not currently available
	49918: true, // not enough resources to process the request
	49919: true, // too many create or update operations
	49920: true, // too many operations
	10928: true, // resource limit reached
	10929: true, // resource limit: server too busy
	615:   true, // could not find database ID (stale cache during reconfiguration)
	926:   true, // database cannot be opened (during reconfiguration)
}

// brokenConnection are errors after which the connection is gone and the outcome
// of the request is unknown: it may have committed just before the link broke.
// Only idempotent work is retried on them (after database/sql has discarded the
// bad connection, so the retry reconnects).
var brokenConnection = map[int32]bool{
	40197: true, // the service encountered an error processing the request (failover)
	40143: true, // the service encountered an error processing the request
	40540: true, // the service encountered an error processing the request
	233:   true, // transport: the connection was closed during login
	64:    true, // transport: the specified network name is no longer available
	20:    true, // transport: the instance does not support encryption or is gone
	997:   true, // transport: overlapped I/O in progress (named pipes)
	10053: true, // transport: connection aborted
	10054: true, // transport: connection reset by the peer
	10060: true, // transport: connection timed out
}

// retryMode says which failures an operation may run again after.
type retryMode int

const (
	// retryAll: the operation is idempotent, or its effect is harmless to repeat
	// (a claim whose answer was lost is rescued after its lease): retry both
	// rolled-back and broken-connection errors.
	retryAll retryMode = iota
	// retrySafe: run again only when the server certainly did not commit
	// (Submit and Finish on the pool, whose repetition is not harmless).
	retrySafe
)

// errorClass sorts an error for retry decisions.
type errorClass int

const (
	classFinal errorClass = iota
	classRolledBack
	classBroken
)

// serverErrors lists every error of the server's response that err carries, first
// to last. go-mssqldb reports the last one as the Error itself and keeps them all
// in Error.All: a batch can send a deadlock (1205) and then another error (266,
// a transaction count mismatch, or a procedure's own THROW), and the earlier one
// decides what happened to the transaction.
func serverErrors(err error) []mssql.Error {
	var me mssql.Error
	if !errors.As(err, &me) {
		return nil
	}
	if len(me.All) == 0 {
		return []mssql.Error{me}
	}
	return me.All
}

// classify tells rolled-back errors from broken connections from everything else.
// Any error of the response counts: a rollback anywhere in it means nothing the
// request did was committed.
func classify(err error) errorClass {
	if err == nil {
		return classFinal
	}
	if all := serverErrors(err); all != nil {
		class := classFinal
		for _, e := range all {
			switch {
			case rolledBack[e.Number]:
				return classRolledBack
			case brokenConnection[e.Number]:
				class = classBroken
			}
		}
		return class
	}
	var ne net.Error
	var se mssql.StreamError
	switch {
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.As(err, &ne), errors.As(err, &se):
		return classBroken
	}
	return classFinal
}

// Backoff: deadlocks and lock time-outs clear in milliseconds; connection and
// service errors need seconds (Microsoft advises a few seconds before retrying a
// failed connection to Azure SQL).
const (
	retryAttempts   = 5
	lockBackoffBase = 20 * time.Millisecond
	lockBackoffMax  = 500 * time.Millisecond
	connBackoffBase = 500 * time.Millisecond
	connBackoffMax  = 8 * time.Second
)

// retry runs f until it succeeds, fails for good, or ctx ends, waiting with
// exponential backoff and jitter between attempts. It is only ever used around
// work this package owns from BEGIN to COMMIT: a statement inside a caller's
// transaction is never retried, because a deadlock already rolled that whole
// transaction back (XACT_ABORT ON) and only the caller can start it again.
func (d *SQLServer) retry(ctx context.Context, mode retryMode, f func(ctx context.Context) error) error {
	var err error
	for attempt := 0; ; attempt++ {
		if err = f(ctx); err == nil {
			return nil
		}
		class := classify(err)
		if class == classFinal || (class == classBroken && mode == retrySafe) || attempt+1 >= retryAttempts {
			return err
		}
		base, ceiling := lockBackoffBase, lockBackoffMax
		if class == classBroken || !isLockError(err) {
			base, ceiling = connBackoffBase, connBackoffMax
		}
		wait := min(base<<attempt, ceiling)
		wait = wait/2 + rand.N(wait/2+1) // jitter, so racing workers spread out
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

func isLockError(err error) bool {
	for _, e := range serverErrors(err) {
		if e.Number == errDeadlockVictim || e.Number == errLockTimeout || e.Number == errLockResources {
			return true
		}
	}
	return false
}

// IsRetryable reports whether err means the whole transaction was rolled back by
// the server (a deadlock victim, a lock time-out, a refused request), so that a
// caller who ran Submit or TaskFinish inside its own transaction may start that
// transaction again.
func IsRetryable(err error) bool { return classify(err) == classRolledBack }

// mapErr turns SQL Server's errors into stageq's sentinel errors, keeping the
// server's message: THROW 50000-50999 from stageq's procedures and constraint,
// NULL and truncation errors are bad input (ErrInvalid). It looks at every error
// of the response, so a THROW followed by a transaction-count error (266) is
// still reported as the bad input it was.
func mapErr(err error) error {
	all := serverErrors(err)
	if all == nil {
		return err
	}
	for _, e := range all {
		if rolledBack[e.Number] || brokenConnection[e.Number] {
			return err // a rollback or a lost connection, whatever followed it
		}
	}
	for _, me := range all {
		switch {
		case me.Number == errBodyTranCount:
			return fmt.Errorf("%w (%s)", dialect.ErrBodyEndedTx, strings.TrimPrefix(me.Message, "stageq: "))
		case me.Number >= errValidationFirst && me.Number <= errValidationLast,
			me.Number == errCheckViolation, me.Number == errNullViolation,
			me.Number == errTruncation, me.Number == errTruncationOld:
			return fmt.Errorf("%w: %s", dialect.ErrInvalid, strings.TrimPrefix(me.Message, "stageq: "))
		}
	}
	for _, me := range all {
		if me.Number == 0 && strings.Contains(me.Message, "server does not have an active transaction") {
			// The driver's own error: the server ended the transaction (XACT_ABORT
			// after an error, or a task body that ran COMMIT or ROLLBACK).
			return fmt.Errorf("the transaction was ended before stageq could finish it (a task body that commits or rolls back, or an error under XACT_ABORT): %w", err)
		}
	}
	return err
}

// isUniqueViolation reports a PRIMARY KEY or UNIQUE violation anywhere in the
// response.
func isUniqueViolation(err error) bool {
	for _, e := range serverErrors(err) {
		if e.Number == errUniqueKey || e.Number == errUniqueIndex {
			return true
		}
	}
	return false
}
