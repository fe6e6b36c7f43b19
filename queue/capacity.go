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
	// about this long and a long task is never held back from an idle worker
	// elsewhere (bodies of 10 ms prefetch one concurrency's worth, of 100 ms a
	// tenth of it, of a second or more nothing).
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

// gatherSlots waits, up to claimGather, until a full claim's worth of room is
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

// admit takes a claimed task: it starts at once when a slot is free, and
// otherwise waits in the buffer, in claim order, for the next slot to free.
// Its lease is extended from now on like a running task's.
func (w *Worker) admit(t dialect.ClaimedTask) {
	runCtx, cancel := context.WithCancelCause(w.taskCtx)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running[dialect.TaskLease{ID: t.ID, Token: t.Token}] = cancel
	if w.executing < w.cfg.Concurrency && len(w.buffered) == 0 {
		w.executing++
		w.launch(runCtx, cancel, t)
		return
	}
	w.buffered = append(w.buffered, bufferedTask{t: t, ctx: runCtx, cancel: cancel})
}

// bufferedTask is a prefetched task waiting for a slot.
type bufferedTask struct {
	t      dialect.ClaimedTask
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// slotFreed gives a slot whose body ended to the next buffered task, or back
// to the claim loop. Called with w.mu held.
func (w *Worker) slotFreed() {
	w.executing--
	for len(w.buffered) > 0 && !w.stopping {
		next := w.buffered[0]
		w.buffered = w.buffered[1:]
		if context.Cause(next.ctx) != nil {
			// Its lease was lost while it waited (the heartbeat found another
			// holder): it never runs here.
			w.dropLocked(next.t, next.cancel)
			continue
		}
		w.executing++
		w.launch(next.ctx, next.cancel, next.t)
		return
	}
}

// dropLocked forgets an attempt that never started. Called with w.mu held.
func (w *Worker) dropLocked(t dialect.ClaimedTask, cancel context.CancelCauseFunc) {
	delete(w.running, dialect.TaskLease{ID: t.ID, Token: t.Token})
	cancel(nil)
	w.log.Warn().Int64("task_id", t.ID).Msg("lease lost before a prefetched task started; another worker owns it now")
}

// takeBuffered empties the buffer for good (shutdown): its tasks never start,
// and the caller hands them back.
func (w *Worker) takeBuffered() []dialect.ClaimedTask {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopping = true
	out := make([]dialect.ClaimedTask, 0, len(w.buffered))
	for _, b := range w.buffered {
		lost := context.Cause(b.ctx) != nil // the heartbeat found another holder
		delete(w.running, dialect.TaskLease{ID: b.t.ID, Token: b.t.Token})
		b.cancel(nil)
		if !lost {
			out = append(out, b.t)
		}
	}
	w.buffered = nil
	return out
}
