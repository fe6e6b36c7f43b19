package dialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Inspector is what the dashboard and `queuectl why` read beyond the Operator's
// lists. It reads durable facts only — tasks' state, execution_order, run_at,
// limit_key and kind; processes' paused, max_parallel and current_order; limits;
// workers' heartbeats — never the claim path's bookkeeping (a process's run-queue
// flags), which may change shape. Every statement is bounded: lists stop at
// WaitListMax rows and say how many there were.
//
// How to implement it: supply the statements of WaitStatements (PostgreSQL and
// SQLite share the Go of CollectTaskWait), or read the same facts in one batch.
type Inspector interface {
	// TaskWait reads what decides whether task id may start now. Workers whose
	// last heartbeat is older than live (or that stopped) count as dead.
	// ErrNotFound when the task has left the queue.
	TaskWait(ctx context.Context, id int64, live time.Duration) (TaskWait, error)
	// TaskStateCounts counts the queue's tasks by process, stage and state,
	// largest groups first, at most maxRows groups.
	TaskStateCounts(ctx context.Context, maxRows int) ([]StateCount, error)
}

// AsInspector returns the dialect's Inspector, or an error naming the dialect.
func AsInspector(d Dialect) (Inspector, error) {
	if in, ok := d.(Inspector); ok {
		return in, nil
	}
	return nil, fmt.Errorf("the %s dialect cannot explain waiting tasks yet", d.Name())
}

// WaitListMax bounds every list of TaskWait.
const WaitListMax = 10

// TaskWait is everything that can hold a task back, read at Now (the
// database's clock).
type TaskWait struct {
	Task     TaskInfo `json:"task"`
	LimitKey string   `json:"limit_key,omitempty"`
	Now      time.Time

	ProcessID    int64 `json:"process_id"`
	ProcessState string
	Paused       bool
	MaxParallel  *int
	CurrentOrder *int

	// Lower are unfinished tasks of the process at lower ExecutionOrders, the
	// lowest first (at most WaitListMax); LowerCount counts them all.
	Lower      []TaskRef
	LowerCount int
	// ProcessRunning are the process's running tasks (its max_parallel slots).
	ProcessRunning      []TaskRef
	ProcessRunningCount int
	// Limits are the limits the task counts against that exist: its limit key
	// and kind:KIND, each with the running tasks that hold its slots.
	Limits []LimitWait

	// LiveWorkers and LiveSlots are the workers heartbeating within live and
	// their total concurrency; Running counts every running task.
	LiveWorkers int
	LiveSlots   int
	Running     int
	// KindWorkers are live workers that claim this kind (WorkerInfo.Kinds; a
	// worker that recorded none claims every kind).
	KindWorkers []string
}

// TaskRef is a task named in an explanation.
type TaskRef struct {
	ID       int64     `json:"id"`
	Process  string    `json:"process"`
	Order    int       `json:"order"`
	State    string    `json:"state"`
	WorkerID string    `json:"worker_id,omitempty"`
	RunAt    time.Time `json:"run_at"`
	Attempt  int       `json:"attempt"`
}

// LimitWait is a limit and the tasks holding its slots.
type LimitWait struct {
	Key          string    `json:"key"`
	Max          int       `json:"max"`
	Running      int       `json:"running"`
	Holders      []TaskRef `json:"holders"`
	HoldersCount int       `json:"-"`
}

// StateCount is how many tasks of a process's stage are in a state.
type StateCount struct {
	Process string
	Order   int
	State   string
	Count   int
}

// WaitStatements are a dialect's statements for CollectTaskWait. Parameters
// are positional, in the order given.
type WaitStatements struct {
	// Task: in id. Out: id, process_id, process name, execution_order, kind,
	// body, state, attempt, max_attempts, priority, run_at, worker_id ('' for
	// none), last_error (''), limit_key (''), abandons, process state, paused,
	// max_parallel, current_order, the database's now.
	Task string
	// Lower: in process_id, execution_order, max rows. Out per task, lowest order
	// first: id, process name, execution_order, state, worker_id, run_at,
	// attempt, count of all rows matched.
	Lower string
	// RunningProcess: in process_id, max rows; RunningKey: in limit key, max
	// rows; RunningKind: in kind, max rows. Out as Lower, running tasks only.
	RunningProcess, RunningKey, RunningKind string
	// Limits: in limit key, 'kind:'+kind. Out: key, max_running.
	Limits string
	// Workers: in live (milliseconds). Out: live workers, their total
	// concurrency, running tasks.
	Workers string
	// KindWorkers: in kind, live (milliseconds), max rows. Out: worker id.
	KindWorkers string
}

// CollectTaskWait runs a dialect's WaitStatements. mapErr maps driver errors.
func CollectTaskWait(ctx context.Context, q Querier, st WaitStatements, id int64, live time.Duration, mapErr func(error) error) (TaskWait, error) {
	var w TaskWait
	t := &w.Task
	err := ScanWaitTask(q.QueryRowContext(ctx, st.Task, id).Scan, &w)
	if errors.Is(err, sql.ErrNoRows) {
		return w, fmt.Errorf("task %d: %w (finished tasks leave the queue; see logs)", id, ErrNotFound)
	}
	if err != nil {
		return w, fmt.Errorf("task %d: %w", id, mapErr(err))
	}
	if w.Lower, w.LowerCount, err = collectRefs(ctx, q, st.Lower, mapErr, w.ProcessID, t.Order, WaitListMax); err != nil {
		return w, fmt.Errorf("task %d: lower stages: %w", id, err)
	}
	if w.ProcessRunning, w.ProcessRunningCount, err = collectRefs(ctx, q, st.RunningProcess, mapErr, w.ProcessID, WaitListMax); err != nil {
		return w, fmt.Errorf("task %d: running tasks of its process: %w", id, err)
	}
	rows, err := q.QueryContext(ctx, st.Limits, w.LimitKey, LimitKindPrefix+t.Kind)
	if err != nil {
		return w, fmt.Errorf("task %d: limits: %w", id, mapErr(err))
	}
	for rows.Next() {
		var l LimitWait
		if err := rows.Scan(&l.Key, &l.Max); err != nil {
			rows.Close()
			return w, fmt.Errorf("task %d: limits: %w", id, err)
		}
		w.Limits = append(w.Limits, l)
	}
	if err := rows.Close(); err != nil {
		return w, fmt.Errorf("task %d: limits: %w", id, mapErr(err))
	}
	for i := range w.Limits {
		l := &w.Limits[i]
		stmt, arg := st.RunningKey, l.Key
		if l.Key == LimitKindPrefix+t.Kind {
			stmt, arg = st.RunningKind, t.Kind
		}
		if l.Holders, l.Running, err = collectRefs(ctx, q, stmt, mapErr, arg, WaitListMax); err != nil {
			return w, fmt.Errorf("task %d: limit %q: %w", id, l.Key, err)
		}
	}
	if err := q.QueryRowContext(ctx, st.Workers, live.Milliseconds()).Scan(&w.LiveWorkers, &w.LiveSlots, &w.Running); err != nil {
		return w, fmt.Errorf("task %d: workers: %w", id, mapErr(err))
	}
	rows, err = q.QueryContext(ctx, st.KindWorkers, t.Kind, live.Milliseconds(), WaitListMax)
	if err != nil {
		return w, fmt.Errorf("task %d: workers of kind %q: %w", id, t.Kind, mapErr(err))
	}
	for rows.Next() {
		var wid string
		if err := rows.Scan(&wid); err != nil {
			rows.Close()
			return w, fmt.Errorf("task %d: workers of kind %q: %w", id, t.Kind, err)
		}
		w.KindWorkers = append(w.KindWorkers, wid)
	}
	if err := rows.Close(); err != nil {
		return w, fmt.Errorf("task %d: workers of kind %q: %w", id, t.Kind, mapErr(err))
	}
	return w, nil
}

// WaitTaskCols are the columns ScanWaitTask reads but the last (the
// database's now), as PostgreSQL and SQLite select them from tasks t joined
// to processes p.
const WaitTaskCols = `t.id, t.process_id, p.name, t.execution_order, t.kind, t.body, t.state, t.attempt, t.max_attempts,
       t.priority, t.run_at, coalesce(t.worker_id, ''), coalesce(t.last_error, ''), coalesce(t.limit_key, ''),
       t.abandons, p.state, p.paused, p.max_parallel, p.current_order`

// ScanWaitTask reads the row of WaitStatements.Task into w.
func ScanWaitTask(scan func(dest ...any) error, w *TaskWait) error {
	t := &w.Task
	var runAt, now TimeScan
	var maxPar, cur sql.NullInt64
	if err := scan(&t.ID, &w.ProcessID, &t.Process, &t.Order, &t.Kind, &t.Body, &t.State, &t.Attempt, &t.MaxAttempts,
		&t.Priority, &runAt, &t.WorkerID, &t.LastError, &w.LimitKey, &t.Abandons, &w.ProcessState, &w.Paused, &maxPar, &cur, &now); err != nil {
		return err
	}
	t.RunAt, w.Now = runAt.Time, now.Time
	w.MaxParallel, w.CurrentOrder = IntOrNil(maxPar), IntOrNil(cur)
	return nil
}

// collectRefs reads task references and the count of all rows matched (the
// last column of every row).
func collectRefs(ctx context.Context, q Querier, stmt string, mapErr func(error) error, args ...any) ([]TaskRef, int, error) {
	rows, err := q.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, 0, mapErr(err)
	}
	defer rows.Close()
	refs, total, err := ScanTaskRefs(rows)
	if err != nil {
		return nil, 0, mapErr(err)
	}
	return refs, total, nil
}

// TaskRefCols are the columns ScanTaskRefs reads, as PostgreSQL and SQLite
// select them from tasks t joined to processes p; the last is the count of all
// rows matched, before LIMIT.
const TaskRefCols = `t.id, p.name, t.execution_order, t.state, coalesce(t.worker_id, ''), t.run_at, t.attempt, count(*) OVER ()`

// ScanTaskRefs reads the current result set's rows of (id, process,
// execution_order, state, worker_id, run_at, attempt, total); the caller
// closes rows (a batch may have more result sets).
func ScanTaskRefs(rows *sql.Rows) ([]TaskRef, int, error) {
	var out []TaskRef
	total := 0
	for rows.Next() {
		var r TaskRef
		var runAt TimeScan
		if err := rows.Scan(&r.ID, &r.Process, &r.Order, &r.State, &r.WorkerID, &runAt, &r.Attempt, &total); err != nil {
			return nil, 0, err
		}
		r.RunAt = runAt.Time
		out = append(out, r)
	}
	return out, total, rows.Err()
}

// CollectStateCounts runs a dialect's state-count statement: in max rows; out
// process name, execution_order, state, count.
func CollectStateCounts(ctx context.Context, q Querier, stmt string, maxRows int, mapErr func(error) error) ([]StateCount, error) {
	rows, err := q.QueryContext(ctx, stmt, maxRows)
	if err != nil {
		return nil, fmt.Errorf("count tasks by state: %w", mapErr(err))
	}
	out, err := ScanStateCounts(rows)
	if err != nil {
		return nil, fmt.Errorf("count tasks by state: %w", mapErr(err))
	}
	return out, nil
}

// ScanStateCounts reads rows of (process, execution_order, state, count) and
// closes them.
func ScanStateCounts(rows *sql.Rows) ([]StateCount, error) {
	defer rows.Close()
	var out []StateCount
	for rows.Next() {
		var c StateCount
		if err := rows.Scan(&c.Process, &c.Order, &c.State, &c.Count); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// TimeScan scans a time however the driver returns it: a time.Time, or SQLite's
// UTC text ('2006-01-02 15:04:05.000'). NULL leaves the zero time.
type TimeScan struct{ Time time.Time }

// Scan implements sql.Scanner.
func (t *TimeScan) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		t.Time = time.Time{}
	case time.Time:
		t.Time = x
	case string:
		return t.parse(x)
	case []byte:
		return t.parse(string(x))
	default:
		return fmt.Errorf("scan time: unsupported %T", v)
	}
	return nil
}

func (t *TimeScan) parse(s string) error {
	for _, layout := range []string{"2006-01-02 15:04:05.999999999", time.RFC3339Nano} {
		if p, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			t.Time = p
			return nil
		}
	}
	return fmt.Errorf("scan time: cannot parse %q", s)
}
