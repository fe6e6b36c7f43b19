package queue

import (
	"context"
	"fmt"
	"slices"

	"github.com/stageq/stageq/dialect"
)

// idleScan bounds how many tasks of each state workLeft reads.
const idleScan = 200

// workLeft tells an --exit-when-idle worker whether the queue is really done
// with it: "" when no task runs anywhere and none that this worker could run
// waits (available, or scheduled for a retry's backoff or a delay), else what
// is left. A task running elsewhere may open a stage of this worker's kinds;
// tasks that only an operator can move on (behind a failed task, in a paused
// process) do not keep it. Quiet for ExitWhenIdle is not enough on its own: a
// retry's backoff or a delay longer than that would find no worker left.
func (w *Worker) workLeft(ctx context.Context) (string, error) {
	for _, state := range []string{dialect.StateRunning, dialect.StateAvailable, dialect.StateScheduled} {
		sctx, cancel := w.stmtCtx(ctx)
		ts, err := w.d.TaskList(sctx, dialect.TaskFilter{State: state, Limit: idleScan})
		cancel()
		if err != nil {
			return "", fmt.Errorf("exit when idle: %w", err)
		}
		for _, t := range ts {
			if state == dialect.StateRunning || slices.Contains(w.kinds, t.Kind) {
				return fmt.Sprintf("task %d of process %s is %s", t.ID, t.Process, state), nil
			}
		}
	}
	return "", nil
}
