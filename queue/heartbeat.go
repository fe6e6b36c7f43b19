package queue

import (
	"context"
	"time"

	"github.com/stageq/stageq/dialect"
)

// rescueBatch bounds one rescue pass, well under SQL Server's lock escalation.
const rescueBatch = 100

// heartbeatLoop keeps the worker's leases alive and rescues other workers'
// expired ones. When heartbeats fail for longer than a lease, the worker's
// leases may already belong to others: it stops claiming and cancels its
// running tasks (fail fast) until the database answers again.
func (w *Worker) heartbeatLoop(ctx context.Context) {
	ticker := time.NewTicker(w.cfg.Heartbeat)
	defer ticker.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if w.beat(ctx) {
			lastOK = time.Now()
			if !w.healthy.Swap(true) {
				w.log.Info().Msg("database reachable again; claiming resumes")
			}
		} else if time.Since(lastOK) > w.cfg.Lease && w.healthy.Swap(false) {
			w.log.Error().Dur("since", time.Since(lastOK)).Msg("heartbeats failing longer than a lease; stopped claiming and abandoning running tasks")
			w.cancelAll()
		}
		if n, err := w.d.TaskRescueExpired(ctx, dialect.RescueParams{Max: rescueBatch}); err != nil {
			if ctx.Err() == nil {
				w.log.Warn().Err(err).Msg("rescue failed")
			}
		} else if n > 0 {
			w.log.Info().Int("tasks", n).Msg("rescued tasks whose lease expired")
			signal(w.wake)
		}
	}
}

// beat records the heartbeat and extends leases; tasks the database no longer
// gives this worker are cancelled.
func (w *Worker) beat(ctx context.Context) bool {
	// A busy database may answer slowly; the beat is only too late once the
	// leases it extends could have expired.
	bctx, cancel := context.WithTimeout(ctx, w.cfg.Lease/2)
	defer cancel()
	if err := w.d.WorkerHeartbeat(bctx, w.cfg.ID); err != nil {
		if ctx.Err() == nil {
			w.log.Warn().Err(err).Msg("heartbeat failed")
		}
		return false
	}
	// Only tasks started before the extension can be judged by its answer.
	before := w.runningIDs()
	held, err := w.d.TaskExtendLeases(bctx, dialect.ExtendParams{WorkerID: w.cfg.ID, Lease: w.cfg.Lease})
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn().Err(err).Msg("lease extension failed")
		}
		return false
	}
	holds := make(map[int64]bool, len(held))
	for _, id := range held {
		holds[id] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range before {
		if cancel, still := w.running[id]; still && !holds[id] {
			cancel(errLeaseLost)
		}
	}
	return true
}

func (w *Worker) runningIDs() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make([]int64, 0, len(w.running))
	for id := range w.running {
		ids = append(ids, id)
	}
	return ids
}

func (w *Worker) cancelAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cancel := range w.running {
		cancel(errLeaseLost)
	}
}
