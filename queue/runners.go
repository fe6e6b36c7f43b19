package queue

import (
	"context"
	"runtime/pprof"
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
// A Handler therefore runs on a goroutine that ran other attempts before and
// will run more after it, as an HTTP handler does on a kept-alive connection
// (Handler's documentation says what that asks of it). Ending the runner after
// each Handler instead brought the stack growth back to the no-op drain.
type runners struct {
	jobs chan runJob   // unbuffered: a send succeeds only into an idle runner
	done chan struct{} // closed by stop
	idle time.Duration // how long a runner waits for another attempt
	// run runs one attempt and says whether its goroutine may take another.
	run     func(runJob) (reuse bool)
	wg      sync.WaitGroup
	spawned atomic.Int64 // runners started, for tests
}

// runJob is one admitted attempt and the context it runs under.
type runJob struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	t      attempt
}

// runnerIdle is how long a runner waits for another attempt before it ends,
// so that an idle worker does not keep a burst's goroutines.
const runnerIdle = 5 * time.Second

func newRunners(idle time.Duration, run func(runJob) bool) *runners {
	return &runners{jobs: make(chan runJob), done: make(chan struct{}), idle: idle, run: run}
}

// start runs j on an idle runner, or on a new one when none is idle: an
// attempt never waits for a runner.
func (r *runners) start(j runJob) {
	select {
	case <-r.done:
		// Run's shutdown waits for every attempt before stop, and none
		// starts after: an attempt here could not record its end.
		panic("queue: an attempt started after the worker's runners stopped")
	default:
	}
	select {
	case r.jobs <- j:
		return
	default:
	}
	r.wg.Add(1)
	r.spawned.Add(1)
	go r.loop(j)
}

func (r *runners) loop(j runJob) {
	defer r.wg.Done()
	idle := time.NewTimer(r.idle)
	defer idle.Stop()
	for {
		// The labels a profile cuts by (pprof.Do around Run) are the
		// attempt's context's, whatever the last attempt set.
		pprof.SetGoroutineLabels(j.ctx)
		if !r.run(j) {
			return
		}
		j = runJob{} // an idle runner keeps no attempt alive
		// Go 1.23 timers: Reset discards a fire that was not received.
		idle.Reset(r.idle)
		select {
		case j = <-r.jobs:
		case <-idle.C:
			return
		case <-r.done:
			return
		}
	}
}

// stop ends the idle runners and waits for them. Called once every attempt
// has ended, so no runner is busy and no attempt starts any more.
func (r *runners) stop() {
	close(r.done)
	r.wg.Wait()
}
