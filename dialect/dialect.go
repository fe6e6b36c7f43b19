package dialect

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/stageq/stageq/stages"
)

// Querier is what *sql.DB, *sql.Tx and *sql.Conn have in common: what a
// dialect runs its statements on.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Methods that take a tx *sql.Tx run inside the caller's own transaction when
// it is not nil (enqueue beside the caller's writes, atomic SQL tasks whose body
// and completion commit together). Submit, TaskFinish, ProcessConfigure,
// ClockNow and ScheduleCreate run on the dialect's pool when it is nil, in a
// transaction of the dialect's own where they need one; the schedule locks
// and ScheduleFire (their locks last until tx ends) and TaskExecAtomic need a
// transaction and must not be given nil. Whether there is a transaction is
// said, never guessed from the type of a Querier.

// On is where a method given tx runs its statements: tx, or pool (a *sql.DB,
// or a dialect's own pool querier) when tx is nil. (A nil *sql.Tx inside a
// Querier would not compare equal to nil.)
func On(pool Querier, tx *sql.Tx) Querier {
	if tx != nil {
		return tx
	}
	return pool
}

// Dialect is everything the core asks of a database. Implementations must be safe
// for concurrent use.
type Dialect interface {
	Scheduler // recurring schedules and exclusive leases (schedule.go)
	// Name is the dialect's name: "postgres", "sqlite" or "sqlserver".
	Name() string
	// Where names the database for logs and errors, without a password: the
	// SQLite file's absolute path, or the user, server and database
	// ("postgres app@db1:5432/queue"). A worker started from another working
	// directory, or with a typo in its DSN, meets a database of its own
	// making; this is how an operator sees which.
	Where() string
	// DB is the connection pool of the queue database.
	DB() *sql.DB
	// BeginTx starts a transaction suitable for writing queue tables (SQLite takes
	// its write lock at BEGIN so that a transaction never fails half way to upgrade).
	BeginTx(ctx context.Context) (*sql.Tx, error)
	// Close releases the pool and any listener.
	Close() error
	// Schema is the dialect's migrations (schema.go).
	Schema() Schema

	// Submit inserts tasks into one process, creating the process if new and
	// opening the stage they belong to. All or nothing: in tx, which the caller
	// commits, or (tx nil) in a transaction of its own.
	Submit(ctx context.Context, tx *sql.Tx, p SubmitParams) (SubmitResult, error)

	// TaskClaim leases up to p.Max available tasks to a worker and writes the
	// start of their Logs rows, in one transaction.
	TaskClaim(ctx context.Context, p ClaimParams) ([]ClaimedTask, error)
	// TaskFinish records the end of an attempt, fenced by the lease token, and moves
	// the process to its next stage when the attempt finished the current one.
	// It returns ErrLeaseLost, changing nothing, when the token no longer holds.
	// In tx when not nil (an atomic task's body and completion).
	TaskFinish(ctx context.Context, tx *sql.Tx, p FinishParams) error
	// TaskExtendLeases extends the leases of the attempts a worker is running
	// (p.Tasks) and returns those it still holds; one missing from the answer was
	// lost. A lease the worker holds but did not list is not extended: it expires
	// and is rescued, so an attempt the worker gave up on cannot stay running.
	TaskExtendLeases(ctx context.Context, p ExtendParams) ([]TaskLease, error)
	// TaskRescueExpired returns tasks whose lease expired to the queue (or fails
	// them when they are out of attempts), closing their Logs rows as abandoned.
	// A task whose process row is gone (deleted by hand) is removed instead, so
	// that it cannot come back in every pass. It returns how many it handled.
	TaskRescueExpired(ctx context.Context, p RescueParams) (int, error)

	// WorkerRegister inserts or refreshes a worker's row.
	WorkerRegister(ctx context.Context, w WorkerInfo) error
	// WorkerHeartbeat records that a worker is alive.
	WorkerHeartbeat(ctx context.Context, workerID string) error
	// WorkerStop marks a worker stopped (graceful shutdown).
	WorkerStop(ctx context.Context, workerID string) error

	// LogList reads Logs rows, oldest first.
	LogList(ctx context.Context, f LogFilter) ([]LogEntry, error)
	// TaskList reads the tasks still in the queue (finished tasks have left it).
	TaskList(ctx context.Context, f TaskFilter) ([]TaskInfo, error)
	// ProcessGet reads one process by name.
	ProcessGet(ctx context.Context, name string) (ProcessInfo, error)
}

// Notifier is implemented by dialects that can wake idle workers when work
// arrives (PostgreSQL's LISTEN/NOTIFY). Others are polled.
type Notifier interface {
	// Listen delivers a value on the returned channel whenever tasks may have
	// become available, until ctx ends, and then closes it (the worker's
	// listen service returns when it closes). Deliveries may be coalesced.
	Listen(ctx context.Context) (<-chan struct{}, error)
}

// BatchFinisher is implemented by dialects that can end many attempts in one
// round trip; the worker then records results in batches. Each result is fenced
// by its own token exactly as TaskFinish fences one.
type BatchFinisher interface {
	// TaskFinishMany ends the attempts in one transaction; SQL Server uses one
	// per chunk (maxFinishChunk in dialect/sqlserver). A batch that names a task
	// twice goes in rounds that name each task once (FinishInRounds in this
	// package): PostgreSQL and SQL Server run each round in transactions of
	// its own, SQLite runs such a batch entry by entry in one transaction.
	// Held[i] reports whether ps[i]'s token still held its task
	// (false: nothing was changed for it, as ErrLeaseLost from TaskFinish),
	// also when ps names one task twice under two tokens. With an error, the
	// result still reports what transactions committed before it
	// (FinishResult.Committed).
	TaskFinishMany(ctx context.Context, ps []FinishParams) (FinishResult, error)
}

// FinishResult is what a batch of finished attempts changed.
type FinishResult struct {
	Held []bool
	// Advance lists the processes whose current stage the batch may have ended;
	// with a StageAdvancer, pass them to StagesAdvance (the batch has committed).
	Advance []int64
	// Committed is set only beside an error from a batch that went in several
	// transactions (rounds, chunks): Committed[i] says ps[i]'s end was
	// committed before the error, and Held and Advance then cover those entries
	// alone. Nil beside an error: nothing is known to have been recorded (a
	// commit whose answer was lost may have been).
	Committed []bool
}

// Recorded reports whether entry i's end was committed by a batch that
// returned err: all of them without an error, those marked in Committed with
// one.
func (r FinishResult) Recorded(i int, err error) bool {
	return err == nil || (i < len(r.Committed) && r.Committed[i])
}

// StageAdvancer is implemented by dialects whose completions do not move a
// process to its next stage themselves, so that finishing a task locks no
// shared row: whoever commits the last task of a stage sees it empty afterwards
// and advances it. The dialect's TaskRescueExpired repairs a stage left behind
// by a worker that died between the two.
type StageAdvancer interface {
	// StagesAdvance re-derives the stage of each process whose current stage has
	// no task left (or that has a task failed for good and does not say so yet).
	// Call it after the transaction that finished the tasks has committed; it
	// is idempotent and cheap for processes with nothing to do. It never waits
	// for a process row: busy lists the processes another transaction holds,
	// to try again shortly (on error, all of them).
	StagesAdvance(ctx context.Context, processIDs []int64) (busy []int64, err error)
}

// TaskVacuumer is implemented by dialects whose claims read past what earlier
// claims left behind until a vacuum removes it. On PostgreSQL a claimed task's
// entry in the claim index stays there, dead, until VACUUM, and every claim
// reads that index from its head: between two autovacuum visits (a minute by
// default) each claim reads further, and a drain of a million tasks ran 20%
// slower for it. The worker calls VacuumTasks every so many tasks it claimed
// (WorkerConfig.VacuumEvery).
type TaskVacuumer interface {
	// VacuumTasks vacuums the tasks table, or returns at once, having done
	// nothing, when another vacuum of it is running. ErrVacuumNotAllowed: the
	// connection's role may not vacuum it (the database would only warn).
	VacuumTasks(ctx context.Context) error
}

// ErrVacuumNotAllowed is TaskVacuumer's answer for a role that may not
// vacuum the tasks table; asking again will not help.
var ErrVacuumNotAllowed = errors.New("this role may not vacuum the tasks table")

// AtomicExecer is implemented by dialects that must guard how an atomic task's
// SQL body runs inside the transaction that also records its completion: a
// body that ends that transaction (its own COMMIT or ROLLBACK) or, on SQL
// Server, leaves one open is ErrBodyEndedTx; SQLite also shifts leases (see
// WriteLockHolder). Others run the body with tx.ExecContext. It may end tx
// itself when the body failed (the caller's Rollback is then a no-op).
type AtomicExecer interface {
	TaskExecAtomic(ctx context.Context, tx *sql.Tx, body string) error
}

// BodySessioner is implemented by dialects whose SQL bodies run in a database
// session that can outlive a killed worker (PostgreSQL: the server notices a
// dead client only when it next talks to it). The worker runs such a body on
// the connection BodyConn returns, as the text BodyConn returns, which makes
// the running body findable (PostgreSQL marks the body's text with the attempt;
// SQL Server records the session in the attempt's Logs row), so the rescue of
// the expired lease can end the body before the task runs again.
type BodySessioner interface {
	// BodyConn takes a connection of the body pool for an attempt's body and
	// returns it with the text to run there: the body itself, or the body with
	// a mark the rescue finds it by. ErrLeaseLost: the attempt is no longer
	// running. Any other error leaves nothing started; the connection is not
	// returned.
	BodyConn(ctx context.Context, s BodyStart) (*sql.Conn, string, error)
}

// BodyEnder is implemented by dialects whose SQL body may outlive the
// worker's call: a client that gives up on a statement (its context ended,
// its connection broke) does not stop the server's session at once, and a
// body may even catch the cancel. Before an attempt is handed back for
// another worker to run at once (released at shutdown, abandoned for a lost
// connection), its body must have stopped, or the task would run twice at
// once. EndBody ends the attempt's body session if one still runs and
// reports whether none does any more.
type BodyEnder interface {
	EndBody(ctx context.Context, l TaskLease) (gone bool, err error)
}

// BodyStart is an attempt whose SQL body is about to start.
type BodyStart struct {
	Lease TaskLease
	Body  string
	// Atomic: the body runs in the transaction that also records the
	// attempt's end (the session must stay findable until that commits).
	Atomic bool
	// LeaseHeld, asked once the connection is in hand, says whether the worker
	// knows the lease is still held (it was claimed less than half a lease
	// ago), so the dialect need not read it again before the body starts.
	// When nil or false, BodyConn must check it: the lease may have expired
	// and the task been rescued, and its body must not start.
	LeaseHeld func() bool
}

// WriteLockHolder is implemented by dialects with one writer at a time for the
// whole database (SQLite), whose atomic tasks hold that write lock while their
// body runs: no heartbeat, completion or rescue of any worker can write
// meanwhile, so no lease can be extended, and none rescued either. Its
// TaskExecAtomic shifts every lease still valid when the body began by as long
// as the body held the lock, in the atomic transaction itself (which commits
// that shift even when the body failed); WriteHolds lets a worker's fail-fast
// deadline count the holds of its own process the same way.
type WriteLockHolder interface {
	// WriteHolds reports whether an atomic body of this process holds the write
	// lock now, and how long such bodies have held it in all since Open.
	WriteHolds() (holding bool, total time.Duration)
}

// Task states in the Tasks table. Tasks that succeeded, were discarded or were
// cancelled leave the table; their history stays in Logs.
const (
	StateBlocked   = "blocked"   // waiting for a lower ExecutionOrder of its process (or a pause)
	StateScheduled = "scheduled" // its stage is open; waiting for its run_at
	StateAvailable = "available" // may start now
	StateRunning   = "running"   // leased to a worker
	StateFailed    = "failed"    // out of attempts; blocks later stages
)

// TaskStates are the states of a task in the queue, the values a state filter
// accepts.
var TaskStates = []string{StateBlocked, StateScheduled, StateAvailable, StateRunning, StateFailed}

// Process states.
const (
	ProcessActive    = "active"
	ProcessSucceeded = "succeeded"
	ProcessFailed    = "failed"
	// ProcessCancelled: an operator's cancel or discard removed its last tasks,
	// or left only running ones, which have ended since: it ended without
	// doing all its work. New tasks make it active again.
	ProcessCancelled = "cancelled"
)

// Outcome is how an attempt ended, as written to Logs.outcome.
type Outcome string

// Attempt outcomes.
const (
	OutcomeRunning   Outcome = "running"   // started, not ended (yet)
	OutcomeSucceeded Outcome = "succeeded" // the task is done
	OutcomeFailed    Outcome = "failed"    // the attempt failed; Logs.retry_at says whether another follows
	OutcomeAbandoned Outcome = "abandoned" // lost to infrastructure: the lease expired (the worker died or stalled), or the body's connection was cut

	OutcomeReleased Outcome = "released" // handed back at shutdown; the attempt is not counted
)

// DefaultProcess is the process of tasks enqueued without one. It has the seed's
// global barrier: its stages follow each other across everything enqueued to it.
const DefaultProcess = "default"

// NewTask is one task of a submission, as stages resolves it from a plan.
type NewTask = stages.Resolved

// SubmitParams is a submission of tasks to one process, as stages resolves it
// from a plan.
type SubmitParams = stages.Submission

// SubmitResult names what a submission created.
type SubmitResult struct {
	ProcessID int64
	TaskIDs   []int64 // in the order of SubmitParams.Tasks
}

// ClaimParams asks for tasks for one worker.
type ClaimParams struct {
	WorkerID string
	Max      int
	// Token is the lease token (fence) of every task of this claim. It must
	// be new for each claim (a worker draws it at random): an end is fenced
	// by it, and Logs keeps one attempt's row per (task, token), so a token
	// used again could end another claim's attempt or a second one's row.
	Token int64
	Lease time.Duration
	// Kinds are the task kinds the worker can run: the claim leases no other.
	// Nil leases every kind (tools and benchmarks); a worker always sets it.
	Kinds []string
}

// ClaimedTask is a task leased to a worker.
type ClaimedTask struct {
	ID          int64
	ProcessID   int64
	Process     string
	Order       int
	Kind        string
	Body        string
	Attempt     int // 1 for the first run
	MaxAttempts int
	Atomic      bool
	Token       int64
	// Abandons is how many of the earlier attempts were abandoned (lost to a
	// dead worker or connection): they do not count against MaxAttempts.
	Abandons int
}

// FinishParams ends an attempt.
type FinishParams struct {
	TaskID int64
	Token  int64
	// ProcessID is the task's process, whose stage a StageAdvancer moves on
	// after the finish committed (zero: unknown, left to the rescue pass).
	ProcessID int64
	Outcome   Outcome // succeeded, failed, released or abandoned (the body's database connection was lost)
	Error     string
	// RetryAfter, with OutcomeFailed, schedules another attempt after this delay;
	// zero means the task has failed for good.
	RetryAfter time.Duration
}

// ExtendParams extends a worker's leases.
type ExtendParams struct {
	WorkerID string
	Lease    time.Duration
	Tasks    []TaskLease // the attempts the worker is running
}

// TaskLease names one attempt: a task and the lease token of its claim.
type TaskLease struct {
	ID    int64 `json:"id"`
	Token int64 `json:"token"`
}

// RescueParams bounds one rescue pass.
type RescueParams struct {
	Max int // rows per pass, well under SQL Server's lock-escalation threshold
}

// WorkerInfo describes a worker process.
type WorkerInfo struct {
	ID          string
	Hostname    string
	PID         int
	Concurrency int
	Version     string
	// Kinds are the task kinds the worker claims (recorded for `queuectl why`).
	Kinds []string
}

// KindsJSON encodes kinds as the JSON array the dialects store and pass to
// their claim statements; nil stays SQL NULL (every kind).
func KindsJSON(kinds []string) any {
	if kinds == nil {
		return nil
	}
	b, _ := json.Marshal(kinds) // []string always encodes
	return string(b)
}

// LogFilter selects Logs rows; zero fields do not filter.
type LogFilter struct {
	Process string
	// ProcessID is one process by id. Give it with Process, its name: Logs
	// is indexed by process id on PostgreSQL and by name on SQL Server, and
	// either condition alone reads past every other process's rows on the
	// other one.
	ProcessID int64
	TaskID    int64
	WorkerID  string
	Outcome   Outcome
	Since     time.Time
	Limit     int
	// AfterID pages the list: of the rows that started at Since exactly, only
	// those whose id is greater (the list is ordered by start time, then id).
	AfterID int64
	// Newest takes the last Limit rows of the filter instead of the first
	// (still returned oldest first): the recent end of a long trail.
	Newest bool
}

// LogEntry is one attempt of one task.
type LogEntry struct {
	ID        int64      `json:"id"`
	TaskID    int64      `json:"task_id"`
	ProcessID int64      `json:"process_id"`
	Process   string     `json:"process"`
	Order     int        `json:"order"`
	Kind      string     `json:"kind"`
	Body      string     `json:"body"`
	WorkerID  string     `json:"worker_id"`
	Attempt   int        `json:"attempt"`
	StartedAt time.Time  `json:"started_at,omitzero"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	Outcome   Outcome    `json:"outcome"`
	Error     string     `json:"error,omitempty"`
	RetryAt   *time.Time `json:"retry_at,omitempty"`
	// Schedule names the schedule whose tick enqueued the task ("" when enqueued by hand).
	Schedule string `json:"schedule,omitempty"`
}

// TaskFilter selects tasks; zero fields do not filter.
type TaskFilter struct {
	Process string
	State   string
	Limit   int
	Kind    string // "" for every kind
}

// TaskInfo is a task still in the queue.
type TaskInfo struct {
	ID          int64     `json:"id"`
	Process     string    `json:"process"`
	Order       int       `json:"order"`
	Kind        string    `json:"kind"`
	Body        string    `json:"body"`
	State       string    `json:"state"`
	Attempt     int       `json:"attempt"`
	MaxAttempts int       `json:"max_attempts"`
	Priority    int       `json:"priority"`
	RunAt       time.Time `json:"run_at,omitzero"`
	WorkerID    string    `json:"worker_id,omitempty"`
	LastError   string    `json:"last_error,omitempty"`
	// Abandons counts the attempts lost to infrastructure (a dead worker, a
	// cut connection), which Attempt numbers but max_attempts does not count.
	Abandons int `json:"abandons"`
}

// ProcessInfo is a row of Processes.
type ProcessInfo struct {
	ID           int64
	Name         string
	State        string
	CurrentOrder *int
}
