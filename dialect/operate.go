package dialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/stageq/stageq/stages"
)

// ErrWrongState means the operation does not apply to the task or process in its
// current state (retrying a running task, discarding one that has not failed);
// nothing was changed.
var ErrWrongState = errors.New("not allowed in the current state")

// Operator is what the operator commands (queuectl) ask of a database: process
// scheduling settings, the run-state of processes and workers, retry / discard /
// cancel, and concurrency limits.
//
// How to implement it:
//
//  1. Lock order is the queue's everywhere: the process row first, then limit
//     rows, then task rows. A task operation reads the task's process id, locks
//     the process row, then re-reads the task under that lock.
//  2. Every change that can alter which tasks of a process may run (retry,
//     discard, cancel, pause, resume, ProcessConfigure) re-derives the process's
//     stage and run-queue state before committing, as finish and submit do.
//  3. Unknown names and ids return ErrNotFound; an operation that does not apply
//     to the current state returns ErrWrongState; bad values return ErrInvalid.
//     In each case nothing is changed.
//  4. Limits are counted from running tasks, never from separate counters: a slot
//     is a task in state 'running' whose limit key (or kind, or process) matches,
//     so it is released exactly when the task's lease ends (fenced finish, or
//     rescue after expiry). LimitSet takes effect at the next claim.
type Operator interface {
	// ProcessConfigure changes a process's scheduling, in tx or (nil) a
	// transaction of its own; nil fields stay as they are.
	ProcessConfigure(ctx context.Context, tx *sql.Tx, name string, s ProcessSettings) error
	// ProcessList reads processes with their per-stage progress; name "" lists
	// all, and finished processes only when all is true.
	ProcessList(ctx context.Context, f ProcessFilter) ([]ProcessStatus, error)
	// ProcessSetPaused pauses (no new claims; running tasks finish) or resumes.
	ProcessSetPaused(ctx context.Context, name string, paused bool) error
	// ProcessRetry makes every failed task of a process runnable again with
	// fresh attempts and returns how many; ErrWrongState when none has failed.
	ProcessRetry(ctx context.Context, name string) (int, error)
	// ProcessDiscard removes the failed tasks of a process as finished, so later
	// stages may run; ErrWrongState when none has failed.
	ProcessDiscard(ctx context.Context, name string) (int, error)
	// ProcessCancel removes every task of a process that is not running; running
	// ones finish their attempt. It returns how many were removed and how many
	// are still running.
	ProcessCancel(ctx context.Context, name string) (removed, running int, err error)
	// TaskRetry makes one failed task runnable again with fresh attempts.
	TaskRetry(ctx context.Context, id int64) error
	// TaskDiscard removes one failed task as finished.
	TaskDiscard(ctx context.Context, id int64) error
	// TaskCancel removes one task that is not running.
	TaskCancel(ctx context.Context, id int64) error
	// WorkerList reads the Workers table, most recent heartbeat first.
	WorkerList(ctx context.Context) ([]WorkerStatus, error)

	// LimitSet creates or changes a limit: a named key, "kind:KIND", or
	// "process:NAME" (the process's max_parallel; the process must exist).
	LimitSet(ctx context.Context, key string, max int) error
	// LimitGet reads one limit with the slots in use now.
	LimitGet(ctx context.Context, key string) (LimitInfo, error)
	// LimitList reads every limit, processes' max_parallel included.
	LimitList(ctx context.Context) ([]LimitInfo, error)
	// LimitDelete removes a limit (the key becomes unlimited).
	LimitDelete(ctx context.Context, key string) error
}

// actorKey carries who asks for an operator action, for its Logs row.
type actorKey struct{}

// WithActor names who performs the operator actions run with ctx (for example
// "alice@db1"): TaskRetry, TaskDiscard, TaskCancel and their Process forms write
// a Logs row per task they change, with the actor as its worker_id.
func WithActor(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, actorKey{}, who)
}

// Actor is who WithActor named, or "operator" when nobody was named.
func Actor(ctx context.Context) string {
	if who, ok := ctx.Value(actorKey{}).(string); ok && who != "" {
		return who
	}
	return "operator"
}

// Operator actions as Logs records them: the outcome of the row written for
// each task an action changes, and its note (Logs.error).
const (
	OutcomeCancelled Outcome = "cancelled" // removed before it ran (again): by queuectl cancel, or by a claim when its process row was deleted by hand
	OutcomeDiscarded Outcome = "discarded" // a failed task given up by queuectl discard
	OutcomeRetried   Outcome = "retried"   // a failed task given fresh attempts by queuectl retry
)

// Outcomes are every Logs outcome, the values an outcome filter accepts.
var Outcomes = []Outcome{OutcomeRunning, OutcomeSucceeded, OutcomeFailed, OutcomeAbandoned, OutcomeReleased,
	OutcomeRetried, OutcomeDiscarded, OutcomeCancelled}

// AuditNote is the Logs.error text of an operator action's row.
func AuditNote(o Outcome) string {
	switch o {
	case OutcomeCancelled:
		return "cancelled by an operator"
	case OutcomeDiscarded:
		return "discarded by an operator: later stages may run"
	case OutcomeRetried:
		return "retried by an operator: attempts start over"
	}
	return string(o)
}

// AsOperator returns the dialect's Operator, or an error naming the dialect when
// it has none yet.
func AsOperator(d Dialect) (Operator, error) {
	if op, ok := d.(Operator); ok {
		return op, nil
	}
	return nil, fmt.Errorf("the %s dialect does not support operator commands yet", d.Name())
}

// ProcessSettings are a process's scheduling knobs, as stages defines them.
type ProcessSettings = stages.Settings

// Bounds of the settings and of limit keys.
const (
	MaxWeight   = stages.MaxWeight
	MaxLimitKey = stages.MaxLimitKey
)

// ValidateSettings names the first bad setting (ErrInvalid).
func ValidateSettings(s ProcessSettings) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Limit key prefixes: a limit on every task of a kind, or on a process.
const (
	LimitKindPrefix    = stages.LimitKindPrefix
	LimitProcessPrefix = stages.LimitProcessPrefix
)

// ValidateLimitKey checks a limit key as a task carries it (ErrInvalid).
func ValidateLimitKey(key string) error {
	if err := stages.ValidateLimitKey(key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// ValidateLimit checks a LimitSet call: any key form and a maximum >= 0 (>= 1
// for a process; pause a process to stop it).
func ValidateLimit(key string, max int) error {
	rest, isProcess := strings.CutPrefix(key, LimitProcessPrefix)
	kind, isKind := strings.CutPrefix(key, LimitKindPrefix)
	switch {
	case isProcess && rest == "":
		return fmt.Errorf("%w: limit key %q names no process", ErrInvalid, key)
	case isKind && kind == "":
		return fmt.Errorf("%w: limit key %q names no kind", ErrInvalid, key)
	case !isProcess && !isKind:
		if err := ValidateLimitKey(key); err != nil {
			return err
		}
	case len(key) > MaxLimitKey+len(LimitProcessPrefix):
		return fmt.Errorf("%w: limit key is too long", ErrInvalid)
	}
	if max < 0 {
		return fmt.Errorf("%w: limit %q must be >= 0, got %d", ErrInvalid, key, max)
	}
	if max > math.MaxInt32 {
		return fmt.Errorf("%w: limit %q: %d is out of range: it must fit in 32 bits", ErrInvalid, key, max)
	}
	if isProcess && max < 1 {
		return fmt.Errorf("%w: a process limit must be >= 1, got %d (pause the process to stop it)", ErrInvalid, max)
	}
	return nil
}

// ProcessFilter selects processes for ProcessList.
type ProcessFilter struct {
	Name string // "" for all
	All  bool   // include succeeded processes
	// Limit reads the first Limit processes by name (0: all), their stage
	// counts included: a page of a queue of many processes.
	Limit int
}

// ProcessStatus is a process with its scheduling and per-stage progress.
type ProcessStatus struct {
	ID           int64         `json:"id"`
	Name         string        `json:"name"`
	State        string        `json:"state"` // active, failed, succeeded
	Paused       bool          `json:"paused"`
	CurrentOrder *int          `json:"current_order"`
	Priority     int           `json:"priority"`
	Weight       int           `json:"weight"`
	MaxParallel  *int          `json:"max_parallel"`
	Stages       []StageStatus `json:"stages"`
}

// Settled reports that the process will not move on by itself: it
// succeeded, or was cancelled, or it failed and nothing of it still runs or
// waits to run. A task that fails for good fails its process at once, while
// the other tasks of its stage run on (and their retries wait their turn):
// until they end, a failed process is not yet settled. Paused, its waiting
// tasks do not count.
func (p ProcessStatus) Settled() bool {
	switch p.State {
	case ProcessSucceeded, ProcessCancelled:
		return true
	case ProcessFailed:
		for _, s := range p.Stages {
			if s.Running > 0 || (!p.Paused && p.CurrentOrder != nil && s.Order == *p.CurrentOrder && s.Pending > 0) {
				return false
			}
		}
		return true
	}
	return false
}

// StageStatus counts one ExecutionOrder's tasks. Done counts tasks that
// succeeded (from Logs); discarded and cancelled tasks are not counted.
type StageStatus struct {
	Order   int `json:"order"`
	Pending int `json:"pending"` // blocked or available
	Running int `json:"running"`
	Failed  int `json:"failed"`
	Done    int `json:"done"`
}

// Total is every task the stage has had that was not discarded or cancelled.
func (s StageStatus) Total() int { return s.Pending + s.Running + s.Failed + s.Done }

// WorkerStatus is a row of Workers.
type WorkerStatus struct {
	ID          string     `json:"id"`
	Hostname    string     `json:"hostname"`
	PID         int        `json:"pid"`
	Concurrency int        `json:"concurrency"`
	Version     string     `json:"version"`
	StartedAt   time.Time  `json:"started_at,omitzero"`
	HeartbeatAt time.Time  `json:"heartbeat_at,omitzero"`
	StoppedAt   *time.Time `json:"stopped_at,omitempty"`
	Running     int        `json:"running"` // tasks it holds now
	// Now is the database's clock when read, to judge HeartbeatAt by.
	Now time.Time `json:"now,omitzero"`
}

// LimitInfo is a limit and the slots in use.
type LimitInfo struct {
	Key       string    `json:"key"`
	Max       int       `json:"max"`
	Running   int       `json:"running"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// LimitByKey is LimitGet for every dialect: the first of what list finds under
// key (a dialect's listing filtered to one key, "" meaning all), ErrNotFound
// when it finds none; the empty key, which names no limit, is ErrInvalid.
func LimitByKey(ctx context.Context, key string, list func(ctx context.Context, key string) ([]LimitInfo, error)) (LimitInfo, error) {
	if key == "" {
		return LimitInfo{}, fmt.Errorf("limit: %w: the key is empty", ErrInvalid)
	}
	ls, err := list(ctx, key)
	if err != nil {
		return LimitInfo{}, err
	}
	if len(ls) == 0 {
		return LimitInfo{}, fmt.Errorf("limit %q: %w", key, ErrNotFound)
	}
	return ls[0], nil
}

// AllowRetry admits a retry only of a task that failed for good.
func AllowRetry(state, worker string) error {
	if state == StateFailed {
		return nil
	}
	return wrongState(state, worker, "only a failed task can be retried")
}

// AllowDiscard admits a discard only of a task that failed for good.
func AllowDiscard(state, worker string) error {
	if state == StateFailed {
		return nil
	}
	return wrongState(state, worker, "only a failed task can be discarded; cancel removes a waiting one")
}

// AllowCancel admits a cancel of any task that is not running.
func AllowCancel(state, worker string) error {
	if state != StateRunning {
		return nil
	}
	return wrongState(state, worker, "a running task cannot be cancelled; its attempt must end first")
}

func wrongState(state, worker, why string) error {
	if state == StateRunning && worker != "" {
		return fmt.Errorf("%w: it is running on worker %s: %s", ErrWrongState, worker, why)
	}
	return fmt.Errorf("%w: it is %s: %s", ErrWrongState, state, why)
}

// CollectProcessStatus runs a dialect's three process-status queries, each taking
// the filter's (name, all, limit) as its parameters, limit 1<<30 for none
// (args, when given, are those as the dialect's driver takes them): the processes (id, name, state, paused,
// current_order, priority, weight, max_parallel), the queue's counts per process
// and stage (process_id, order, pending, running, failed), and the succeeded
// counts from Logs (process_id, order, done). mapErr maps driver errors.
func CollectProcessStatus(ctx context.Context, db Querier, f ProcessFilter, listSQL, countSQL, doneSQL string, mapErr func(error) error, args ...any) ([]ProcessStatus, error) {
	if len(args) == 0 {
		limit := f.Limit
		if limit <= 0 {
			limit = 1 << 30
		}
		args = []any{f.Name, f.All, limit}
	}
	out, err := QueryAll(ctx, db, mapErr, listSQL, func(r *sql.Rows, p *ProcessStatus) error {
		var cur, maxPar sql.NullInt64
		if err := r.Scan(&p.ID, &p.Name, &p.State, &p.Paused, &cur, &p.Priority, &p.Weight, &maxPar); err != nil {
			return err
		}
		p.CurrentOrder, p.MaxParallel = IntOrNil(cur), IntOrNil(maxPar)
		return nil
	}, args...)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	if f.Name != "" && len(out) == 0 {
		return nil, fmt.Errorf("process %q: %w", f.Name, ErrNotFound)
	}
	type stageRow struct {
		pid int64
		StageStatus
	}
	counts, err := QueryAll(ctx, db, mapErr, countSQL, func(r *sql.Rows, s *stageRow) error {
		return r.Scan(&s.pid, &s.Order, &s.Pending, &s.Running, &s.Failed)
	}, args...)
	if err != nil {
		return nil, fmt.Errorf("count tasks: %w", err)
	}
	done, err := QueryAll(ctx, db, mapErr, doneSQL, func(r *sql.Rows, s *stageRow) error {
		return r.Scan(&s.pid, &s.Order, &s.Done)
	}, args...)
	if err != nil {
		return nil, fmt.Errorf("count finished tasks: %w", err)
	}
	stages := map[[2]int64]*StageStatus{}
	for _, c := range append(counts, done...) {
		k := [2]int64{c.pid, int64(c.Order)}
		s, ok := stages[k]
		if !ok {
			s = &StageStatus{Order: c.Order}
			stages[k] = s
		}
		s.Pending, s.Running, s.Failed, s.Done = s.Pending+c.Pending, s.Running+c.Running, s.Failed+c.Failed, s.Done+c.Done
	}
	index := map[int64]int{}
	for i, p := range out {
		index[p.ID] = i
	}
	for k, s := range stages {
		if i, ok := index[k[0]]; ok {
			out[i].Stages = append(out[i].Stages, *s)
		}
	}
	for i := range out {
		sort.Slice(out[i].Stages, func(a, b int) bool { return out[i].Stages[a].Order < out[i].Stages[b].Order })
	}
	return out, nil
}
