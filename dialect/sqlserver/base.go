package sqlserver

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/golang-sql/civil"
	mssql "github.com/microsoft/go-mssqldb"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/dialect/sqlbase"
)

// newBase gives sqlbase the statements of operate.go, read.go, limits.go,
// prune.go, schedule.go and exclusive_lease.go and the steps SQL Server takes
// its own way. SQL Server's own methods that shadow sqlbase's only refuse what
// its sized columns cannot hold, then call sqlbase (TestBaseMethodsTaken lists
// the rest).
func (d *SQLServer) newBase() sqlbase.Base {
	return sqlbase.Base{
		Pool:      bound{d.db},
		InTx:      d.inTx,
		MapErr:    mapErr,
		Time:      func(t time.Time) any { return t },
		OpenStage: d.openStage,
		Configure: d.configure,
		Retry: func(ctx context.Context, repeatable bool, fn func(ctx context.Context) error) error {
			mode := retrySafe
			if repeatable {
				mode = retryAll
			}
			return d.retry(ctx, mode, fn)
		},
		Interval:    func(ttl time.Duration) any { return millis(ttl) },
		CountsAsRow: true,
		Who:         actor,
		PruneAge:    pruneAge,
		IsUnique:    isUniqueViolation,
		IDs:         scheduleIDs,
		TxQuerier:   func(tx *sql.Tx) dialect.Querier { return bound{tx} },
		SQL: sqlbase.Statements{
			LockProcess:     lockProcessSQL,
			LockProcessByID: lockProcessByIDSQL,
			Pause:           pauseSQL,
			AuditFailed:     auditFailedSQL,
			RetryProcess:    retryProcessSQL,
			DiscardProcess:  discardProcessSQL,
			CancelProcess:   cancelProcessSQL,
			Running:         runningSQL,
			TaskProcess:     taskProcessSQL,
			TaskLock:        taskLockSQL,
			AuditTask:       auditTaskSQL,
			RetryTask:       retryTaskSQL,
			DeleteTask:      deleteTaskSQL,
			ProcessList:     processListSQL,
			StageCount:      stageCountSQL,
			StageDone:       stageDoneSQL,
			WorkerList:      workerListSQL,
			LogList:         logListSQL,
			LogListNewest:   logListNewestSQL,
			TaskList:        taskListSQL,
			ProcessGet:      processGetSQL,
		},
		Limits: sqlbase.LimitStatements{Upsert: limitUpsertSQL, Delete: limitDeleteSQL, List: limitListSQL},
		Retention: sqlbase.RetentionStatements{
			Logs: pruneLogsSQL, Workers: pruneWorkersSQL, Processes: pruneProcessesSQL, Chunk: pruneChunk,
			Record: pruneRecordSQL, Last: pruneLastSQL,
		},
		Schedule: sqlbase.ScheduleStatements{
			Create: scheduleCreateSQL, List: scheduleListSQL, Pause: schedulePauseSQL, Delete: scheduleDeleteSQL,
			LockDue: scheduleLockDueSQL, Lock: scheduleLockSQL, Unfinished: scheduleUnfinishedSQL,
			Tag: scheduleTagSQL, Run: scheduleRunSQL, Advance: scheduleAdvanceSQL, Touch: scheduleTouchSQL,
			PruneRuns: schedulePruneRunsSQL, NextDue: scheduleNextDueSQL, RunList: scheduleRunListSQL,
			ClockNow: clockNowSQL,
		},
		Lease: sqlbase.LeaseStatements{
			Acquire: leaseAcquireSQL,
			Get:     leaseGetSQL,
			Extend:  leaseExtendSQL,
			Release: leaseReleaseSQL,
			List:    leaseListSQL,
		},
	}
}

// inTx runs fn in the caller's transaction tx, or (tx nil) in a new one that
// commits when fn succeeds. A new one is run again from its start after an
// error that rolled it back (a deadlock victim, a lock time-out): only the
// whole transaction can be repeated, never a statement inside it. A failed
// COMMIT is not repeated: database/sql can no longer roll that transaction
// back, and what the server did with it is unknown.
func (d *SQLServer) inTx(ctx context.Context, tx *sql.Tx, fn func(dialect.Querier) error) error {
	if tx != nil {
		return fn(bound{tx})
	}
	var commitErr error
	err := d.retry(ctx, retrySafe, func(ctx context.Context) error {
		tx, err := d.begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback() // after Commit, a no-op; on an error or a panic, the locks go at once
		if err := fn(bound{tx}); err != nil {
			return err
		}
		commitErr = tx.Commit()
		return nil
	})
	if err != nil {
		return err
	}
	if commitErr != nil {
		return fmt.Errorf("commit: %w", mapErr(commitErr))
	}
	return nil
}

// actor is who the audit rows name (dialect.Actor), cut to the 200 UTF-16 code
// units Logs.worker_id holds, on a character boundary: an operator's long
// user@host must not refuse the command, and the statements' nvarchar(200)
// local would otherwise cut it silently, possibly inside a surrogate pair.
func actor(ctx context.Context) string {
	who := dialect.Actor(ctx)
	n := 0
	for i, r := range who {
		w := 1
		if r > 0xFFFF {
			w = 2
		}
		if n+w > maxName {
			return who[:i]
		}
		n += w
	}
	return who
}

// bound is the pool as sqlbase sees it (dialect.Querier). sqlbase passes a
// statement's arguments by position, in the order its documentation lists
// them; this package's statements name their parameters (@pName) and copy each
// into a local of the column's type (statements_test.go). bound names the
// arguments after the statement's parameters, in the order the statement
// first uses them, and gives each the one fixed declaration of params.go, so a
// statement keeps one plan whatever the values.
type bound struct{ q dialect.Querier }

func (b bound) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	named, err := bindArgs(query, args)
	if err != nil {
		return nil, err
	}
	return b.q.ExecContext(ctx, query, named...)
}

func (b bound) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	named, err := bindArgs(query, args)
	if err != nil {
		return nil, err
	}
	return b.q.QueryContext(ctx, query, named...)
}

// QueryRowContext hands a binding error to database/sql as an argument whose
// conversion fails (a *sql.Row cannot be made with an error of ours): the
// row's Scan returns it, and the statement does not run.
func (b bound) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	named, err := bindArgs(query, args)
	if err != nil {
		return b.q.QueryRowContext(ctx, query, bindError{err})
	}
	return b.q.QueryRowContext(ctx, query, named...)
}

// bindError is an argument that cannot be converted: its Value is the error.
type bindError struct{ err error }

func (e bindError) Value() (driver.Value, error) { return nil, e.err }

// paramRe finds a statement's parameters; each is used exactly once, in the
// DECLARE that copies it into its typed local.
var paramRe = regexp.MustCompile(`@p[A-Z]\w*`)

// paramOrder caches each statement's parameter names, in order.
var paramOrder sync.Map // statement text → []string

func paramsInOrder(query string) []string {
	if v, ok := paramOrder.Load(query); ok {
		return v.([]string)
	}
	var names []string
	for _, m := range paramRe.FindAllString(query, -1) {
		names = append(names, m[1:])
	}
	paramOrder.Store(query, names)
	return names
}

// bindArgs names args after query's parameters and types each one as
// params.go's helpers do. Arguments already named (a step of this package's
// own, such as openStage, built with those helpers) pass unchanged; a list
// that names some and not others is refused.
func bindArgs(query string, args []any) ([]any, error) {
	named := 0
	for _, a := range args {
		if _, ok := a.(sql.NamedArg); ok {
			named++
		}
	}
	switch {
	case named == len(args) && named > 0:
		return args, nil
	case named > 0:
		return nil, fmt.Errorf("sqlserver: %d of %d arguments named; name all or none", named, len(args))
	}
	names := paramsInOrder(query)
	if len(names) != len(args) {
		return nil, fmt.Errorf("sqlserver: statement takes %d parameters %v, given %d arguments", len(names), names, len(args))
	}
	out := make([]any, len(args))
	for i, a := range args {
		var v any
		switch a := a.(type) {
		case string:
			v = mssql.NVarCharMax(a)
		case int:
			v = clampInt32(int64(a))
		case int64:
			v = a
		case bool:
			v = a
		case time.Time:
			v = civil.DateTimeOf(a.UTC())
		case sql.NullString:
			// NULL as '' (one declaration for both): the statement reads it
			// back with NULLIF, so an empty string is NULL there too.
			s := ""
			if a.Valid {
				s = a.String
			}
			v = mssql.NVarCharMax(s)
		case sql.NullInt64:
			// NULL as 0, read back with NULLIF as above.
			var n int64
			if a.Valid {
				n = a.Int64
			}
			v = n
		default:
			return nil, fmt.Errorf("sqlserver: parameter @%s: no fixed declaration for %T", names[i], a)
		}
		out[i] = sql.Named(names[i], v)
	}
	return out, nil
}
