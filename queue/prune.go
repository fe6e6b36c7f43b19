package queue

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/stageq/stageq/dialect"
)

// Retention is how long a worker's pruner keeps old rows; zero keeps that kind
// of row for ever. Every worker prunes (no leader): each statement deletes one
// small batch of rows no other worker holds, so they share the work.
type Retention struct {
	// Logs rows of attempts that started longer ago than this are deleted
	// (running ones never). Default DefaultRetainLogs.
	Logs time.Duration
	// Workers rows silent (or stopped) longer than this, and holding no task.
	// Default DefaultRetainWorkers; a positive value below MinRetainWorkers is
	// refused (NewWorker).
	Workers time.Duration
	// Processes that finished (succeeded or cancelled) longer ago than this and
	// have no task left; their settings (priority, weight, max_parallel) go with
	// them. Default DefaultRetainProcesses.
	Processes time.Duration
	// Every is the pause between passes (default DefaultPruneEvery, with jitter).
	Every time.Duration
	// Batch bounds the rows one statement deletes (default DefaultPruneBatch),
	// far below SQL Server's lock-escalation threshold of 5,000 locks.
	Batch int
	// Off turns the pruner off on this worker.
	Off bool
}

// Retention defaults: an audit trail of three months, and a quarter-hourly pass.
const (
	DefaultRetainLogs      = 90 * 24 * time.Hour
	DefaultRetainWorkers   = 7 * 24 * time.Hour
	DefaultRetainProcesses = 90 * 24 * time.Hour
	DefaultPruneEvery      = 15 * time.Minute
	DefaultPruneBatch      = 1000
	// pruneMaxBatches bounds one pass per kind of row, so that a huge backlog is
	// worked off over several passes instead of in one long burst of writes.
	pruneMaxBatches = 100
)

// MinRetainWorkers is the shortest Workers retention a worker takes. A live
// worker's row is refreshed by its heartbeats alone (at most MaxHeartbeat
// apart, each taking up to half a lease, none landing while the database is
// out of reach), and a row pruned under a running worker is not written again:
// queuectl status would show no such worker, and migrate prune-routines, which
// reads the rows, would take its routines for unused. Ten minutes is the live
// window prune-routines uses by default (status calls a worker dead after one
// silent minute), so no worker these still count live is pruned.
const MinRetainWorkers = 10 * time.Minute

// withDefaults fills the zero fields; negative durations mean "keep for ever".
func (r Retention) withDefaults() Retention {
	def := func(v *time.Duration, d time.Duration) {
		switch {
		case *v == 0:
			*v = d
		case *v < 0:
			*v = 0
		}
	}
	def(&r.Logs, DefaultRetainLogs)
	def(&r.Workers, DefaultRetainWorkers)
	def(&r.Processes, DefaultRetainProcesses)
	if r.Every <= 0 {
		r.Every = DefaultPruneEvery
	}
	if r.Batch <= 0 || r.Batch > 4000 {
		r.Batch = DefaultPruneBatch
	}
	return r
}

// pruneLoop runs a prune pass soon after start, then every Retention.Every,
// until ctx ends.
func (w *Worker) pruneLoop(ctx context.Context, pass func()) {
	r := w.cfg.Retention.withDefaults()
	if r.Off || (r.Logs == 0 && r.Workers == 0 && r.Processes == 0) {
		return
	}
	pr, ok := w.d.(dialect.Pruner)
	log := w.log.With().Str("component", "prune").Logger()
	if !ok {
		log.Info().Str("dialect", w.d.Name()).Msg("retention is not implemented for this dialect; nothing is pruned")
		return
	}
	// The first pass waits a little (jittered) so that a fleet starting at once
	// does not prune at once; the database would sort it out, but needlessly.
	wait := time.Duration(rand.Int64N(int64(min(r.Every, 10*time.Second)))) + time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		st, err := w.prunePass(ctx, pr, r)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn().Err(err).Msg("prune pass failed; next pass as planned")
		} else if st.LogsDeleted+st.WorkersDeleted+st.ProcessesDeleted > 0 {
			log.Info().Int64("logs", st.LogsDeleted).Int64("workers", st.WorkersDeleted).
				Int64("processes", st.ProcessesDeleted).Msg("pruned old rows")
		}
		pass()
		wait = r.Every + time.Duration(rand.Int64N(int64(r.Every/10)+1))
	}
}

// prunePass deletes, batch by batch, what the retention no longer keeps, then
// records the pass for `queuectl status`.
func (w *Worker) prunePass(ctx context.Context, pr dialect.Pruner, r Retention) (dialect.PruneStatus, error) {
	st := dialect.PruneStatus{WorkerID: w.cfg.ID, RetainLogs: r.Logs, RetainWorkers: r.Workers, RetainProcesses: r.Processes}
	for _, k := range []struct {
		age   time.Duration
		prune func(context.Context, dialect.PruneParams) (int, error)
		n     *int64
	}{
		{r.Logs, pr.PruneLogs, &st.LogsDeleted},
		{r.Workers, pr.PruneWorkers, &st.WorkersDeleted},
		{r.Processes, pr.PruneProcesses, &st.ProcessesDeleted},
	} {
		if k.age <= 0 {
			continue
		}
		for range pruneMaxBatches {
			sctx, cancel := w.stmtCtx(ctx)
			n, err := k.prune(sctx, dialect.PruneParams{Age: k.age, Batch: r.Batch})
			err = w.stmtErr(sctx, ctx, "prune", err)
			cancel()
			if err != nil {
				return st, err
			}
			*k.n += int64(n)
			if n < r.Batch {
				break
			}
		}
	}
	sctx, cancel := w.stmtCtx(ctx)
	defer cancel()
	return st, w.stmtErr(sctx, ctx, "prune record", pr.PruneRecord(sctx, st))
}
