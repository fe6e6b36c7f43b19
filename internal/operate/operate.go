// Package operate is the operator actions that queuectl and the dashboard
// both offer: retry, discard and cancel, of one task or of a process, and a
// process's pause and resume. Each names its dialect.Operator calls and what
// it says when done once, so that the command line and the page cannot drift
// apart on either. It is a package
// of its own because internal/cli imports the dashboard.
package operate

import (
	"context"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// Action is one of Retry, Discard and Cancel.
type Action struct {
	task     func(dialect.Operator, context.Context, int64) error
	taskDone string // a format of the task id
	process  func(context.Context, dialect.Operator, string) (string, error)
}

// The actions. Retry and discard apply to failed tasks only; cancel to any
// task that is not running (for a process, running ones finish their attempt).
var (
	Retry   = Action{dialect.Operator.TaskRetry, "task %d will run again", onFailed(dialect.Operator.ProcessRetry, "will run again")}
	Discard = Action{dialect.Operator.TaskDiscard, "task %d discarded", onFailed(dialect.Operator.ProcessDiscard, "discarded")}
	Cancel  = Action{dialect.Operator.TaskCancel, "task %d cancelled", cancelProcess}
)

// OnTask runs the action on task id and says what it did; the message is
// meant only when err is nil.
func (a Action) OnTask(ctx context.Context, op dialect.Operator, id int64) (string, error) {
	return fmt.Sprintf(a.taskDone, id), a.task(op, ctx, id)
}

// OnProcess runs the action on the tasks of process name it applies to and
// says how many; the message is meant only when err is nil.
func (a Action) OnProcess(ctx context.Context, op dialect.Operator, name string) (string, error) {
	return a.process(ctx, op, name)
}

// onFailed is the process side of retry and discard: both act on the
// process's failed tasks alone and say how many there were.
func onFailed(call func(dialect.Operator, context.Context, string) (int, error), done string) func(context.Context, dialect.Operator, string) (string, error) {
	return func(ctx context.Context, op dialect.Operator, name string) (string, error) {
		n, err := call(op, ctx, name)
		return fmt.Sprintf("%d failed task(s) of process %q %s", n, name, done), err
	}
}

// cancelProcess says how many tasks are left running, since cancel does not
// stop them.
func cancelProcess(ctx context.Context, op dialect.Operator, name string) (string, error) {
	n, running, err := op.ProcessCancel(ctx, name)
	return fmt.Sprintf("%d task(s) of process %q cancelled; %d still running will finish their attempt", n, name, running), err
}

// SetPaused pauses process name (pause true) or resumes it, and says which;
// the message is meant only when err is nil.
func SetPaused(ctx context.Context, op dialect.Operator, name string, pause bool) (string, error) {
	verb := "paused"
	if !pause {
		verb = "resumed"
	}
	return fmt.Sprintf("process %q %s", name, verb), op.ProcessSetPaused(ctx, name, pause)
}
