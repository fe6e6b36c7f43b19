package queue

import (
	"context"
	"sync"
	"time"

	"github.com/stageq/stageq/dialect"
)

// How many tasks a claim asks for, and when (issue 9). A claim and a recorded
// end each cost a transaction whose commit waits for the disk, whatever its
// size; throughput is their batch size over that wait. So under a backlog the
// worker claims for many slots at once, not for each slot as it frees, and
// while bodies are short it claims ahead of its free slots (a prefetch buffer)
// so one claim feeds more bodies than the worker runs at once.
const (
	// claimGather is the longest a worker under a backlog waits for more of its
	// slots to free before claiming for those that have. Without a backlog
	// (the last claim found less than it asked for) it claims at once, so
	// pickup and stage handoff latencies do not pay for it.
	claimGather = 5 * time.Millisecond
	// prefetchWindow sizes the buffer: it holds about this much work, judged
	// by how long bodies have lately run, so a prefetched task waits for a slot
	// about this long (bodies of 10 ms prefetch one concurrency's worth, of
	// 100 ms a tenth of it, of a second or more nothing). When the bodies
	// ahead of it turn long, bufferMaxWait bounds its wait.
	prefetchWindow = 10 * time.Millisecond
	// maxPrefetch bounds the buffer, in multiples of the concurrency and in
	// tasks, however short bodies are.
	maxPrefetchFactor = 7
	maxPrefetch       = 1024
)

// bodyClock keeps a moving average of how long bodies run, which sizes the
// prefetch buffer.
type bodyClock struct {
	mu  sync.Mutex
	avg time.Duration
	n   int
}

// observe adds one body's duration (a 1/16 exponential moving average, after
// the first 16 plain).
func (c *bodyClock) observe(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = min(c.n+1, 16)
	c.avg += (d - c.avg) / time.Duration(c.n)
}

// reset forgets the bodies seen: no prefetching until 16 more have run.
func (c *bodyClock) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.avg, c.n = 0, 0
}

// prefetch is how many tasks may wait in the buffer for a worker of
// concurrency c: none until 16 bodies have run, then prefetchWindow's worth.
func (c *bodyClock) prefetch(concurrency int) int {
	c.mu.Lock()
	avg, n := c.avg, c.n
	c.mu.Unlock()
	if n < 16 {
		return 0
	}
	limit := min(maxPrefetchFactor*concurrency, maxPrefetch)
	if avg <= 0 {
		return limit
	}
	return int(min(int64(limit), int64(concurrency)*int64(prefetchWindow)/int64(avg)))
}

// freeSlots is how many more tasks the worker may claim: its concurrency plus
// the prefetch buffer's size, less the bodies executing and the tasks waiting
// in the buffer; and never so many that the attempts it holds in all (those
// waiting for their end to be recorded too) pass twice that room, so a
// database that records ends slowly slows claims down too.
func (w *Worker) freeSlots() int {
	room := w.cfg.Concurrency + w.bodies.prefetch(w.cfg.Concurrency)
	w.mu.Lock()
	defer w.mu.Unlock()
	return max(0, min(room-w.executing-len(w.buffered), 2*room-len(w.running)))
}

// gatherSlots waits, up to claimGather, until a concurrency's worth of room is
// free or nothing is held. Called only under a backlog.
func (w *Worker) gatherSlots(ctx context.Context) {
	timer := time.NewTimer(claimGather)
	defer timer.Stop()
	for w.freeSlots() < w.cfg.Concurrency && w.heldCount() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-w.slotFree:
		case <-timer.C:
			return
		}
	}
}

// bufferMaxWait: a prefetched task that has waited this long for a slot shows
// that the bodies ahead of it turned long (a stage of slow tasks after many
// quick ones, say). The whole buffer is then handed back for other workers to
// run, and the worker prefetches nothing until bodies have run short again. A
// stall of the database as long does the same (it makes short bodies long):
// long enough that it is rare, short enough that a long task is not kept
// from an idle worker for long. The claim loop checks on each pass, so the
// wait can pass this by up to a poll interval. A variable so that tests can
// hold a buffer for longer.
var bufferMaxWait = time.Second

// bufferedTask is a prefetched task waiting for a slot.
type bufferedTask struct {
	t      attempt
	ctx    context.Context
	cancel context.CancelCauseFunc
	since  time.Time
}

// admit takes a claimed task: it starts at once when a slot is free, and
// otherwise waits in the buffer, in claim order, for the next slot to free.
// Its lease is extended from now on like a running task's. The buffer is
// never left holding tasks while a slot is free, so while it holds any, every
// slot's body is running, and the task goroutines' count is above zero.
func (w *Worker) admit(t attempt) {
	runCtx, cancel := context.WithCancelCause(w.taskCtx)
	_, total := w.writeHolds()
	key := dialect.TaskLease{ID: t.ID, Token: t.Token}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running[key] = cancel
	if w.stopping {
		// Claimed just as shutdown began (the claim loop checked before):
		// nothing starts any more.
		w.handBackLocked([]dialect.ClaimedTask{t.ClaimedTask}, releasedAtShutdown)
		return
	}
	if !t.claim.sent.IsZero() {
		// A claim that answered after the fail-fast deadline of the lease it
		// took: the task may be another worker's already, and never starts
		// here. Otherwise that deadline holds until a heartbeat extends it.
		if time.Since(t.claim.leaseFrom(total)) >= w.cfg.Lease-w.failFastMargin() {
			w.handBackLocked([]dialect.ClaimedTask{t.ClaimedTask}, claimAnsweredLate)
			return
		}
		w.noteUnextendedLocked(key, t.claim)
	}
	if w.executing < w.cfg.Concurrency && len(w.buffered) == 0 {
		w.executing++
		w.launch(runCtx, cancel, t)
		return
	}
	w.buffered = append(w.buffered, bufferedTask{t: t, ctx: runCtx, cancel: cancel, since: time.Now()})
}

// noteUnextendedLocked keeps an admitted attempt's claim until a heartbeat
// extends its lease, for the fail-fast deadline (claimsDue). The heartbeat
// loop is woken only by the first such claim or by one whose lease may end
// before the deadline it armed last: at most once per claim batch (a batch's
// tasks share one claimMark), not once per task. Attempts that
// ended and are still listed only make the armed deadline earlier than it need
// be, never later; claimsDue drops them. Called with w.mu held.
func (w *Worker) noteUnextendedLocked(key dialect.TaskLease, m claimMark) {
	if from := m.origin(); len(w.unextended) == 0 || from.Before(w.unextendedFrom) {
		w.unextendedFrom = from
		signal(w.admitted)
	}
	w.unextended[key] = m
}

// slotFreed gives a slot whose body ended to the next buffered task, or back
// to the claim loop. Called with w.mu held.
func (w *Worker) slotFreed() {
	w.executing--
	if len(w.buffered) == 0 || w.stopping {
		return
	}
	next := w.buffered[0]
	w.buffered[0] = bufferedTask{}
	w.buffered = w.buffered[1:]
	w.executing++
	w.launch(next.ctx, next.cancel, next.t)
}

// forgetBufferedLocked drops a buffered attempt whose lease the heartbeat
// found lost (rescued, or taken by an operator): it never runs here, and
// there is nothing to hand back. Called with w.mu held.
func (w *Worker) forgetBufferedLocked(l dialect.TaskLease) {
	for i, b := range w.buffered {
		if b.t.ID == l.ID && b.t.Token == l.Token {
			w.buffered = append(w.buffered[:i], w.buffered[i+1:]...)
			delete(w.running, l)
			b.cancel(nil)
			w.log.Warn().Int64("task_id", l.ID).Msg("lease lost before a prefetched task started; it was not run here")
			return
		}
	}
}

// takeBufferedLocked empties the buffer; the caller hands its tasks back. They
// stay in running, their leases extended, until handed back. Called with w.mu
// held.
func (w *Worker) takeBufferedLocked() []dialect.ClaimedTask {
	out := make([]dialect.ClaimedTask, len(w.buffered))
	for i, b := range w.buffered {
		out[i] = b.t.ClaimedTask
	}
	w.buffered = nil
	return out
}

// releaseStaleBuffer hands the buffer back when its head has waited longer
// than bufferMaxWait, and stops prefetching until bodies run short again.
func (w *Worker) releaseStaleBuffer() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buffered) == 0 || w.stopping {
		return
	}
	waited := time.Since(w.buffered[0].since)
	if waited < bufferMaxWait {
		return
	}
	w.bodies.reset()
	got := w.takeBufferedLocked()
	w.log.Info().Int("tasks", len(got)).Dur("waited", waited).Msg("bodies turned long: handing prefetched tasks back for other workers")
	w.handBackLocked(got, "released before it started: it waited over a second in the worker's prefetch buffer, behind bodies that turned long")
}

// handBackLocked gives claimed tasks that never started back to the queue,
// each in a goroutine of its own so that the finisher records them in one
// batch; their attempts do not count (outcome released). Called with w.mu
// held, while the task goroutines' count is above zero or before the
// shutdown waits for it.
func (w *Worker) handBackLocked(got []dialect.ClaimedTask, why string) {
	for _, t := range got {
		w.tasks.Add(1)
		go func() {
			defer w.tasks.Done()
			w.handBack(t, why)
		}()
	}
}

// handBack records one unstarted task released and forgets it.
func (w *Worker) handBack(t dialect.ClaimedTask, why string) {
	fp := dialect.FinishParams{TaskID: t.ID, Token: t.Token, ProcessID: t.ProcessID,
		Outcome: dialect.OutcomeReleased, Error: why}
	err := w.finishRetrying(w.taskCtx, fp)
	key := dialect.TaskLease{ID: t.ID, Token: t.Token}
	w.mu.Lock()
	if cancel, ok := w.running[key]; ok {
		delete(w.running, key)
		cancel(nil)
	}
	w.mu.Unlock()
	signal(w.slotFree)
	if err != nil {
		w.log.Warn().Err(err).Int64("task_id", t.ID).Msg("could not hand back a task that never started; it runs again once its lease expires")
		return
	}
	w.cfg.Metrics.ended(t, dialect.OutcomeReleased, 0)
	w.log.Debug().Int64("task_id", t.ID).Str("why", why).Msg("task handed back unstarted")
}

// stopBuffer, at shutdown, keeps buffered tasks from starting and hands them
// back at once rather than after the grace period.
func (w *Worker) stopBuffer() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping {
		return
	}
	w.stopping = true
	w.handBackLocked(w.takeBufferedLocked(), releasedAtShutdown)
}

// handBackClaimed hands back what a claim returned after shutdown began: the
// tasks are the worker's (their leases extended) until released. Nothing of
// theirs runs, so there is nothing to cancel.
func (w *Worker) handBackClaimed(got []dialect.ClaimedTask) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range got {
		w.running[dialect.TaskLease{ID: t.ID, Token: t.Token}] = func(error) {}
	}
	w.handBackLocked(got, releasedAtShutdown)
}

// releasedAtShutdown is the error of an attempt handed back unstarted at
// shutdown.
const releasedAtShutdown = "released at worker shutdown before it started"

// claimAnsweredLate is the error of an attempt handed back unstarted because
// its claim answered too late for the worker to trust the lease it took.
const claimAnsweredLate = "released before it started: the claim answered too late to trust its lease"
