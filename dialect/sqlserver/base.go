package sqlserver

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/golang-sql/civil"
	mssql "github.com/microsoft/go-mssqldb"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/dialect/sqlbase"
)

// newBase gives sqlbase the statements of read.go, operate.go (the status
// reads) and exclusive_lease.go, whose methods forward to it. SQL Server takes
// only those of sqlbase.Base's methods, so only the fields they use are set;
// its operator actions, limits, retention and schedules are still batches of
// its own.
func (d *SQLServer) newBase() sqlbase.Base {
	return sqlbase.Base{
		Pool:   bound{d.db},
		MapErr: mapErr,
		Time:   func(t time.Time) any { return t },
		Retry: func(ctx context.Context, repeatable bool, fn func(ctx context.Context) error) error {
			mode := retrySafe
			if repeatable {
				mode = retryAll
			}
			return d.retry(ctx, mode, fn)
		},
		Interval: func(ttl time.Duration) any { return millis(ttl) },
		SQL: sqlbase.Statements{
			ProcessList: processListSQL,
			StageCount:  stageCountSQL,
			StageDone:   stageDoneSQL,
			WorkerList:  workerListSQL,
			LogList:     logListSQL,
			TaskList:    taskListSQL,
			ProcessGet:  processGetSQL,
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

// QueryRowContext panics when the arguments do not fit the statement: a
// *sql.Row cannot carry an error of ours, and a mismatch is a defect that
// TestBaseStatementsBind finds before any run.
func (b bound) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	named, err := bindArgs(query, args)
	if err != nil {
		panic(err)
	}
	return b.q.QueryRowContext(ctx, query, named...)
}

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
// params.go's helpers do.
func bindArgs(query string, args []any) ([]any, error) {
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
		default:
			return nil, fmt.Errorf("sqlserver: parameter @%s: no fixed declaration for %T", names[i], a)
		}
		out[i] = sql.Named(names[i], v)
	}
	return out, nil
}
