package queue

import (
	"context"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// runners are the goroutines attempts run on, kept between attempts.
//
// Why not a goroutine per attempt: a new goroutine starts on a small stack,
// and an SQL body's path through database/sql and the driver grows it by
// copying it to a larger one. In a Go profile of a drain of 200,000 `SELECT 1`
// tasks, that copying was a tenth of the worker's CPU. A runner that goes on
// to the next attempt keeps the stack it grew.
//
// The runner that became idle last takes the next attempt: the garbage
// collector shrinks the stacks of goroutines that wait long, so the one that
// waited least most likely has its stack still grown; and after a burst, the
// runners left without work end after runnerIdle instead of taking turns.
//
// A Handler therefore runs on a goroutine that ran other attempts before and
// will run more after it, as an HTTP handler does on a kept-alive connection
// (Handler's documentation says what that asks of it). Ending the runner after
// each Handler instead brought the stack growth back to the no-op drain.
type runners struct {
	mu      sync.Mutex
	idle    []*runner     // waiting for an attempt, the last to wait last
	done    chan struct{} // closed by stop
	wait    time.Duration // how long a runner waits for another attempt
	run     func(runJob)
	wg      sync.WaitGroup
	spawned atomic.Int64 // runners started, for tests
}

// runner is one idle runner's mailbox. start puts an attempt there while it
// holds runners.mu, once, so the send never blocks.
type runner struct{ next chan runJob }

// runJob is one admitted attempt and the context it runs under.
type runJob struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	t      attempt
}

// runnerIdle is how long a runner waits for another attempt before it ends,
// so that an idle worker does not keep a burst's goroutines.
const runnerIdle = 5 * time.Second

func newRunners(wait time.Duration, run func(runJob)) *runners {
	return &runners{done: make(chan struct{}), wait: wait, run: run}
}

// start runs j on the runner that became idle last, or on a new one when none
// is idle: an attempt never waits for a runner.
func (r *runners) start(j runJob) {
	select {
	case <-r.done:
		// Run's shutdown waits for every attempt before stop, and none
		// starts after: an attempt here could not record its end.
		panic("queue: an attempt started after the worker's runners stopped")
	default:
	}
	r.mu.Lock()
	if n := len(r.idle); n > 0 {
		rn := r.idle[n-1]
		r.idle[n-1] = nil
		r.idle = r.idle[:n-1]
		rn.next <- j
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	r.wg.Add(1)
	r.spawned.Add(1)
	go r.loop(j)
}

func (r *runners) loop(j runJob) {
	defer r.wg.Done()
	self := &runner{next: make(chan runJob, 1)}
	timer := time.NewTimer(r.wait)
	defer timer.Stop()
	for {
		// The labels a profile cuts by (pprof.Do around Run) are the
		// attempt's context's, whatever the last attempt set.
		pprof.SetGoroutineLabels(j.ctx)
		r.run(j)
		j = runJob{} // an idle runner keeps no attempt alive
		idleFrom := time.Now()
		r.mu.Lock()
		r.idle = append(r.idle, self)
		r.mu.Unlock()
		// The timer is not re-armed for each attempt (in a no-op drain's
		// profile that was 0.4 µs of the worker's 17 µs of CPU per task): it
		// runs on across attempts, and when it fires a runner that has not
		// waited the whole of r.wait arms it for the rest and waits on.
		for waiting := true; waiting; {
			select {
			case j = <-self.next:
				waiting = false
			case <-timer.C:
				if left := r.wait - time.Since(idleFrom); left > 0 {
					timer.Reset(left)
					continue
				}
				if r.leave(self) {
					return
				}
				timer.Reset(r.wait)
				j = <-self.next // a start took this runner just as it timed out
				waiting = false
			case <-r.done:
				return // nothing starts after stop, so nothing waits in next
			}
		}
	}
}

// leave takes rn off the idle list; false when a start took it first, whose
// attempt is then in rn.next.
func (r *runners) leave(rn *runner) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := slices.Index(r.idle, rn); i >= 0 {
		r.idle = slices.Delete(r.idle, i, i+1)
		return true
	}
	return false
}

// idleCount is how many runners wait for an attempt.
func (r *runners) idleCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.idle)
}

// stop ends the idle runners and waits for them. Called once every attempt
// has ended, so no runner is busy and no attempt starts any more.
func (r *runners) stop() {
	close(r.done)
	r.wg.Wait()
}
