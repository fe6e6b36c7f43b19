package queue

import (
	"context"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// idleScan bounds how many blocked tasks of a kind workLeft looks behind.
const idleScan = 200

// workLeft tells an --exit-when-idle worker whether the queue is really done
// with it: "" when no task of its kinds waits to run (available, or scheduled
// for a retry's backoff or a delay) and none of its kinds waits for a stage
// that a running task may still end, else what is left. Tasks that only an
// operator can move on (behind a failed task, in a paused process) and tasks
// of other kinds do not keep it. Quiet for ExitWhenIdle is not enough on its
// own: a retry's backoff or a delay longer than that would find no worker
// left.
func (w *Worker) workLeft(ctx context.Context) (string, error) {
	list := func(f dialect.TaskFilter) ([]dialect.TaskInfo, error) {
		sctx, cancel := w.stmtCtx(ctx)
		defer cancel()
		ts, err := w.d.TaskList(sctx, f)
		if err != nil {
			return nil, fmt.Errorf("exit when idle: %w", err)
		}
		return ts, nil
	}
	for _, kind := range w.kinds {
		for _, state := range []string{dialect.StateAvailable, dialect.StateScheduled} {
			ts, err := list(dialect.TaskFilter{State: state, Kind: kind, Limit: 1})
			if err != nil || len(ts) > 0 {
				return left(ts, ""), err
			}
		}
		blocked, err := list(dialect.TaskFilter{State: dialect.StateBlocked, Kind: kind, Limit: idleScan})
		if err != nil {
			return "", err
		}
		asked := map[string]bool{}
		for _, b := range blocked {
			if asked[b.Process] {
				continue
			}
			asked[b.Process] = true
			running, err := list(dialect.TaskFilter{Process: b.Process, State: dialect.StateRunning, Limit: 1})
			if err != nil || len(running) > 0 {
				return left([]dialect.TaskInfo{b}, fmt.Sprintf(" behind running task %d", firstID(running))), err
			}
		}
	}
	return "", nil
}

// left names the first task of ts, with why it is left.
func left(ts []dialect.TaskInfo, why string) string {
	if len(ts) == 0 {
		return ""
	}
	return fmt.Sprintf("task %d of process %s is %s%s", ts[0].ID, ts[0].Process, ts[0].State, why)
}

func firstID(ts []dialect.TaskInfo) int64 {
	if len(ts) == 0 {
		return 0
	}
	return ts[0].ID
}
