package queue

import (
	"context"
	"time"

	"github.com/stageq/stageq/dialect"
)

// rescueBatch bounds one rescue pass, well under SQL Server's lock escalation.
const rescueBatch = 100

// heartbeatLoop keeps the leases of the attempts this worker is running alive.
//
// It extends exactly the attempts running here (by task and token): a lease the
// worker gave up on (its result could not be recorded) is not extended, so it
// expires and any worker rescues it. And the worker fails fast: every good
// extension sets a deadline a little before the leases it extended expire, on
// this machine's monotonic clock from the moment the extension was sent; if no
// later extension lands by then, the database may hand the tasks to others, so
// the worker stops claiming and cancels its running tasks rather than run them
// beside a new holder. It claims again once an extension lands.
//
// An attempt admitted after the last good beat read the running attempts was
// not extended by it: its lease runs from its claim, which may have been sent
// long before that beat (its answer reached the worker late), so a second
// deadline, claimDeadline, comes a little before the earliest such lease ends.
func (w *Worker) heartbeatLoop(ctx context.Context, pass func()) {
	ticker := time.NewTicker(w.cfg.Heartbeat)
	defer ticker.Stop()
	margin := w.failFastMargin()
	deadline := time.NewTimer(w.cfg.Lease - margin)
	defer deadline.Stop()
	claimDeadline := time.NewTimer(time.Hour)
	claimDeadline.Stop() // armed by armClaims while unextended holds attempts
	defer claimDeadline.Stop()
	armClaims := func() {
		if due, ok := w.claimsDue(); ok {
			claimDeadline.Reset(time.Until(due))
		} else {
			claimDeadline.Stop()
		}
	}
	// A beat runs apart from this loop: while the database makes it wait (a
	// lock, a stalled connection), the deadline must still fire on time. One
	// beat at a time; a tick that finds one in flight is skipped.
	type beatResult struct {
		ok   bool
		sent time.Time
		held time.Duration // holds of the write lock so far, when sent
	}
	done := make(chan beatResult, 1)
	inFlight := false
	// On a database with one writer (SQLite), this process's atomic bodies may
	// hold the write lock: then no lease can be extended, nor rescued by
	// anyone, and the atomic transaction gives every lease the time it held
	// the lock (dialect.WriteLockHolder). The deadline does the same: it waits
	// while a hold lasts and is put back by the holds since the last good beat.
	holds := w.writeHolds
	var heldAtGood, credited time.Duration
	lost := func() {
		w.cfg.Metrics.leasesLost(w.heldCount())
		if w.healthy.Swap(false) {
			w.log.Error().Dur("lease", w.cfg.Lease).Msg("leases could not be extended in time; stopped claiming and abandoning running tasks")
		}
		w.cancelAll()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			if holding, total := holds(); holding {
				deadline.Reset(margin)
				continue
			} else if extra := total - heldAtGood - credited; extra > 0 {
				credited += extra
				deadline.Reset(extra)
				continue
			}
			lost()
		case <-claimDeadline.C:
			// While a hold lasts, nobody can rescue; after it, claimsDue
			// counts it (the holds' total it adds to the earliest claim).
			if holding, _ := holds(); holding {
				claimDeadline.Reset(margin)
			} else if due, ok := w.claimsDue(); ok && time.Now().Before(due) {
				claimDeadline.Reset(time.Until(due))
			} else if ok {
				lost()
			}
		case <-w.admitted:
			armClaims()
		case <-ticker.C:
			if inFlight {
				continue
			}
			inFlight = true
			sent := time.Now()
			_, held := holds()
			go func() { done <- beatResult{ok: w.beat(ctx), sent: sent, held: held} }()
		case r := <-done:
			inFlight = false
			if r.ok {
				deadline.Reset(w.cfg.Lease - margin - time.Since(r.sent))
				heldAtGood, credited = r.held, 0
				if !w.healthy.Swap(true) {
					w.log.Info().Msg("database reachable again; claiming resumes")
				}
				armClaims() // the beat extended those it read
			}
			pass()
		}
	}
}

// beat records the heartbeat and extends the leases of the running attempts;
// attempts the database no longer gives this worker are cancelled.
func (w *Worker) beat(ctx context.Context) bool {
	// A busy database may answer slowly; the fail-fast deadline, not this
	// timeout, decides when the worker stops trusting its leases.
	bctx, cancel := context.WithTimeout(ctx, w.cfg.Lease/2)
	defer cancel()
	if err := w.d.WorkerHeartbeat(bctx, w.cfg.ID); err != nil {
		if ctx.Err() == nil {
			w.log.Warn().Err(err).Msg("heartbeat failed")
		}
		return false
	}
	// Only attempts started before the extension can be judged by its answer.
	running := w.runningLeases()
	if len(running) == 0 {
		return true // nothing to extend: an idle worker sends one statement a beat
	}
	held, err := w.d.TaskExtendLeases(bctx, dialect.ExtendParams{WorkerID: w.cfg.ID, Lease: w.cfg.Lease, Tasks: running})
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn().Err(err).Msg("lease extension failed")
		}
		return false
	}
	holds := make(map[dialect.TaskLease]bool, len(held))
	for _, h := range held {
		holds[h] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range running {
		delete(w.unextended, l) // extended, or cancelled below
		if cancel, still := w.running[l]; still && !holds[l] {
			// After a missed fail-fast deadline (unhealthy until this beat
			// returns) every attempt was cancelled and counted already.
			if w.healthy.Load() {
				w.cfg.Metrics.leasesLost(1)
			}
			cancel(errLeaseLost)
			w.forgetBufferedLocked(l)
		}
	}
	return true
}

// rescueLoop returns other workers' expired leases to the queue. It runs apart
// from the heartbeat, with a bounded wait, so a rescue slowed by locks never
// delays the extension of this worker's own leases.
func (w *Worker) rescueLoop(ctx context.Context, pass func()) {
	ticker := time.NewTicker(w.cfg.Heartbeat)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		rctx, cancel := context.WithTimeout(ctx, w.cfg.Heartbeat)
		n, err := w.d.TaskRescueExpired(rctx, dialect.RescueParams{Max: rescueBatch})
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn().Err(err).Msg("rescue failed")
			}
		} else if n > 0 {
			w.cfg.Metrics.rescuedTasks(n)
			w.log.Info().Int("tasks", n).Msg("rescued tasks whose lease expired")
			signal(w.wake)
		}
		pass()
	}
}

func (w *Worker) runningLeases() []dialect.TaskLease {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]dialect.TaskLease, 0, len(w.running))
	for l := range w.running {
		out = append(out, l)
	}
	return out
}

// failFastMargin is how long before a lease ends its fail-fast deadline
// comes: room for the cancellation to take effect before expiry.
func (w *Worker) failFastMargin() time.Duration {
	return min(w.cfg.Heartbeat/2, w.cfg.Lease/10)
}

// writeHolds reports, on a database with one writer, whether this process's
// atomic bodies hold the write lock now and how long they held it so far
// (dialect.WriteLockHolder); elsewhere never.
func (w *Worker) writeHolds() (bool, time.Duration) {
	if w.holder != nil {
		return w.holder.WriteHolds()
	}
	return false, 0
}

// asWriteLockHolder is d as a dialect.WriteLockHolder, or nil.
func asWriteLockHolder(d dialect.Dialect) dialect.WriteLockHolder {
	h, _ := d.(dialect.WriteLockHolder)
	return h
}

// claimsDue is the fail-fast deadline of the attempts no beat has extended
// yet, from their claims; false when there are none.
func (w *Worker) claimsDue() (time.Time, bool) {
	_, total := w.writeHolds()
	w.mu.Lock()
	defer w.mu.Unlock()
	var from time.Time
	for l, m := range w.unextended {
		if _, held := w.running[l]; !held {
			delete(w.unextended, l) // ended
		} else if f := m.origin(); from.IsZero() || f.Before(from) {
			from = f
		}
	}
	// What the caller arms the deadline for: admit wakes it again only for
	// an earlier claim.
	w.unextendedFrom = from
	return from.Add(total + w.cfg.Lease - w.failFastMargin()), !from.IsZero()
}

func (w *Worker) cancelAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.unextended) // cancelled below, or handed back (the buffer)
	// Prefetched tasks never started: handed back rather than cancelled, so
	// that if the database answers again within half a lease they run again
	// at once, without spending their abandon budget on a rescue.
	w.handBackLocked(w.takeBufferedLocked(), "released before it started: the worker could not extend its leases")
	for _, cancel := range w.running {
		cancel(errLeaseLost)
	}
}
