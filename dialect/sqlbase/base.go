// Package sqlbase is the Go that the SQL dialects share around their statements:
// the operator actions, the reads, limits, retention, schedules and
// exclusive leases. A dialect gives a Base
// its statements and the few steps that differ (how it opens a write
// transaction, how it re-derives a process's stage, how it takes a time) and
// embeds it, so the loops, locks order, errors and audit rows are written once.
//
// The three dialects embed a Base (dialect/sqlserver/base.go also names
// Base's positional arguments after SQL Server's @p parameters).
package sqlbase

import (
	"context"
	"database/sql"
	"time"

	"github.com/stageq/stageq/dialect"
)

// Base implements the parts of dialect.Dialect and dialect.Operator that are
// the same Go in every dialect that embeds it. Every field must be set, but
// by a dialect that takes only some of Base's methods: it sets the fields
// those use.
type Base struct {
	// Pool is where reads and single-statement writes run.
	Pool dialect.Querier
	// InTx runs fn in tx, or (tx nil) in a write transaction of the dialect's
	// own that commits when fn succeeds.
	InTx func(ctx context.Context, tx *sql.Tx, fn func(q dialect.Querier) error) error
	// MapErr turns the driver's errors into stageq's sentinels.
	MapErr func(error) error
	// Time is a time as the dialect's statements take it as a parameter.
	Time func(time.Time) any
	// OpenStage re-derives a process's stage and run-queue state after a change
	// to its tasks, inside the change's transaction.
	OpenStage func(ctx context.Context, q dialect.Querier, processID int64) error
	// Configure applies new scheduling settings to a locked process (nil fields
	// unchanged), passing a new priority or weight on to its waiting tasks.
	Configure func(ctx context.Context, q dialect.Querier, processID int64, s dialect.ProcessSettings) error
	// PruneAge is a retention age as the prune statements take it (their first
	// parameter): milliseconds, or a cut-off time read from the database clock.
	PruneAge func(ctx context.Context, age time.Duration) (any, error)
	// IsUnique reports a unique-key violation (a schedule's name, a tick run
	// twice).
	IsUnique func(error) bool
	// IDs is a list of ids as the statements take it: an array, or JSON where
	// the database has none.
	IDs func([]int64) (any, error)
	// Interval is a lease's time to live as the lease statements take it.
	Interval func(time.Duration) any
	// Retry, where set, runs fn again after the dialect's transient errors (a
	// deadlock victim, a failover) for work Base runs on the pool; repeatable
	// says fn may also run again after an error that leaves its outcome unknown
	// (a connection lost mid-request). nil runs fn once.
	Retry func(ctx context.Context, repeatable bool, fn func(ctx context.Context) error) error
	// TxQuerier, where set, is how statements run in a caller's transaction
	// (nil: on the *sql.Tx itself); SQL Server names their arguments there as
	// on its Pool.
	TxQuerier func(*sql.Tx) dialect.Querier
	// CountsAsRow: the statements whose result is a count of rows changed
	// (bulk changes, cancel, prune, limit delete, lease release) answer it as
	// their one row, instead of the driver's rows affected (SQL Server's
	// batches, whose DONE counts a trigger or the driver could add to).
	CountsAsRow bool
	// Who, where set, is who an operator action's audit rows name (nil:
	// dialect.Actor), cut to what the dialect's column holds.
	Who func(ctx context.Context) string
	// LeasesInTx runs each exclusive-lease change in a write transaction of its
	// own (InTx): SQLite needs its write lock from the start, or a statement
	// that reads and then writes can fail to upgrade. Where each statement is
	// atomic by itself (PostgreSQL) they run on the pool, and a refused acquire
	// does not hold the lease's row while it reads the holder.
	LeasesInTx bool

	SQL       Statements
	Limits    LimitStatements
	Retention RetentionStatements
	Schedule  ScheduleStatements
	Lease     LeaseStatements
}

// onPool runs fn, which works on the pool, through Retry where the dialect has
// one.
func (b *Base) onPool(ctx context.Context, repeatable bool, fn func(ctx context.Context) error) error {
	if b.Retry == nil {
		return fn(ctx)
	}
	return b.Retry(ctx, repeatable, fn)
}

// execCount runs a statement that changes rows and returns how many it
// changed (CountsAsRow says how the dialect answers). Errors are the driver's.
func (b *Base) execCount(ctx context.Context, q dialect.Querier, stmt string, args ...any) (int64, error) {
	if b.CountsAsRow {
		var n int64
		if err := q.QueryRowContext(ctx, stmt, args...).Scan(&n); err != nil {
			return 0, err
		}
		return n, nil
	}
	res, err := q.ExecContext(ctx, stmt, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// inTxOrOnPool runs fn once in the caller's transaction tx (never repeated
// there: only the caller can start it again), or on the pool as onPool does.
func (b *Base) inTxOrOnPool(ctx context.Context, tx *sql.Tx, repeatable bool, fn func(ctx context.Context) error) error {
	if tx != nil {
		return fn(ctx)
	}
	return b.onPool(ctx, repeatable, fn)
}

// on is where a statement runs: dialect.On, with the caller's transaction
// wrapped by TxQuerier where the dialect sets one.
func (b *Base) on(tx *sql.Tx) dialect.Querier {
	if tx != nil && b.TxQuerier != nil {
		return b.TxQuerier(tx)
	}
	return dialect.On(b.Pool, tx)
}

// who is who an operator action's audit rows name.
func (b *Base) who(ctx context.Context) string {
	if b.Who != nil {
		return b.Who(ctx)
	}
	return dialect.Actor(ctx)
}

// Statements are a dialect's texts for Base. "In" lists the parameters in
// order; a statement may name them by number and use one more than once.
type Statements struct {
	// LockProcess reads a process's id by name and locks its row until the
	// transaction ends (where the write transaction itself is not already the
	// lock). In: name. Out: id.
	LockProcess string
	// LockProcessByID reads a process row by id and locks it until the
	// transaction ends (where the write transaction itself is not already the
	// lock). No row: the process is gone, its row deleted by hand (stageq
	// deletes none that has a task). In: id. Out: id.
	LockProcessByID string
	// Pause sets a process's paused flag. In: id, paused.
	Pause string
	// AuditFailed writes a Logs row, for an operator action, per failed task of
	// a process. In: process id, who, outcome, note.
	AuditFailed string
	// RetryProcess and DiscardProcess change every failed task of a process.
	// In: process id.
	RetryProcess, DiscardProcess string
	// AuditCancel writes the Logs rows of a cancel (every task not running);
	// "" when CancelProcess writes them itself. In: as AuditFailed.
	AuditCancel string
	// CancelProcess removes every task of a process that is not running. In:
	// process id, and who, outcome, note when AuditCancel is "".
	CancelProcess string
	// Running counts a process's running tasks. In: process id.
	Running string
	// TaskProcess reads a task's process id. In: task id.
	TaskProcess string
	// TaskLock reads a task's state and worker ("" for none), locking its row.
	// In: task id.
	TaskLock string
	// AuditTask writes the Logs row of an operator action on one task. In:
	// task id, who, outcome, note.
	AuditTask string
	// RetryTask and DeleteTask change one task. In: task id.
	RetryTask, DeleteTask string

	// ProcessList, StageCount and StageDone are dialect.CollectProcessStatus's.
	ProcessList, StageCount, StageDone string
	// WorkerList reads Workers, most recent heartbeat first. Out: id, hostname,
	// pid, concurrency, version, started_at, heartbeat_at, stopped_at, running
	// tasks, the database's now.
	WorkerList string
	// LogList reads Logs oldest first. In: process, task id, worker, outcome
	// (each "" or 0 for all), since, limit, the id to page after among the
	// rows started at since exactly (0: none), and process id (0 for all).
	LogList string
	// LogListNewest is LogList's newest rows first (LogFilter.Newest); its
	// parameters are LogList's.
	LogListNewest string
	// TaskList reads tasks. In: process, state ("" for all), limit, kind ("" for all).
	TaskList string
	// ProcessGet reads a process by name. Out: id, name, state, current order.
	ProcessGet string
}
