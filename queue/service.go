package queue

import (
	"context"
	"sync"
)

// Names of a worker's background services, as WorkerConfig.OnPass reports
// them.
const (
	ServiceHeartbeat = "heartbeat" // extends this worker's leases (heartbeat.go)
	ServiceRescue    = "rescue"    // frees other workers' expired leases (heartbeat.go)
	ServicePrune     = "prune"     // deletes what the retention no longer keeps (prune.go)
	ServiceScheduler = "scheduler" // fires recurring schedules (scheduler.go)
	ServiceListen    = "listen"    // turns the database's notifications into claims (this file)
	ServiceVacuum    = "vacuum"    // vacuums the tasks table every so many claims (vacuum.go)
)

// A service is one of a worker's background loops. Run starts every service
// before its first claim and stops them (ends their context, then waits for
// each loop to return) after its last task has recorded its end. A loop calls
// pass after each round of work it finishes: tests wait for that signal
// instead of sleeping, and WorkerConfig.OnPass observes it.
type service struct {
	name string
	run  func(ctx context.Context, pass func())
}

// services is the worker's running services.
type services struct {
	ctx    context.Context // theirs: ends at stop
	cancel context.CancelFunc
	wg     sync.WaitGroup
	onPass func(service string)
}

// newServices makes the context the services run on; start runs them.
func newServices(ctx context.Context, onPass func(string)) *services {
	ctx, cancel := context.WithCancel(ctx)
	return &services{ctx: ctx, cancel: cancel, onPass: onPass}
}

// start runs each service in a goroutine of its own.
func (s *services) start(list []service) {
	for _, svc := range list {
		pass := func() {}
		if s.onPass != nil {
			pass = func() { s.onPass(svc.name) }
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			svc.run(s.ctx, pass)
		}()
	}
}

// stop ends every service and waits until each has returned.
func (s *services) stop() {
	s.cancel()
	s.wg.Wait()
}

// listenLoop wakes the claim loop at each notification (dialect.Notifier's
// channel, which ends with the services' context): new work, a freed slot.
func (w *Worker) listenLoop(ch <-chan struct{}, pass func()) {
	for range ch {
		signal(w.wake)
		pass()
	}
}
