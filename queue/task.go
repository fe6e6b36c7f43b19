package queue

import (
	"context"
	"errors"
	"fmt"
)

// Task is what a handler is given: one attempt of one task.
type Task struct {
	ID          int64
	Process     string
	Order       int
	Kind        string
	Body        string // the payload; SQL text for kind "sql"
	Attempt     int    // 1 for the first attempt
	MaxAttempts int
}

// Handler runs tasks of one kind. Returning nil finishes the task; an error fails
// the attempt (retried with backoff until MaxAttempts; wrap with NoRetry to fail
// for good at once). ctx ends when the worker shuts down past its grace period or
// loses the task's lease: stop then. An error returned after that is not the
// task's failure: the attempt is released (another worker runs it at once) or,
// with the lease lost, left to the worker that holds the task now. Returning nil
// after a shutdown's cancel records the task as succeeded, as it did its work;
// after a lost lease nothing is recorded. A Handler that has not returned
// within a lease of a shutdown's cancel is left running: Run returns an error,
// the lease is no longer extended, and another worker runs the task again once
// it expires.
//
// The goroutine a Handler runs on is kept for later attempts (of any kind): a
// Handler that locks its OS thread (runtime.LockOSThread) must unlock it before
// it returns, and must not leave a thread it changed (namespaces, credentials)
// behind. Profile labels are reset to the worker's before each attempt.
type Handler func(ctx context.Context, t *Task) error

// KindSQL is the kind of tasks whose body is SQL run by the worker itself.
const KindSQL = "sql"

type noRetry struct{ err error }

func (n noRetry) Error() string { return n.err.Error() }
func (n noRetry) Unwrap() error { return n.err }

// NoRetry marks a handler's error as final: the task fails without further attempts.
func NoRetry(err error) error {
	if err == nil {
		return nil
	}
	return noRetry{err}
}

func isNoRetry(err error) bool {
	var n noRetry
	return errors.As(err, &n)
}

// errLeaseLost cancels a running task whose lease the worker no longer holds.
var errLeaseLost = errors.New("lease lost")

// errShutdown cancels running tasks left after the shutdown grace period.
var errShutdown = errors.New("worker shutting down")

// panicError turns a handler's panic into a failed attempt.
func panicError(v any) error { return fmt.Errorf("handler panicked: %v", v) }
