package bench

import (
	"context"
	"fmt"
	"runtime/pprof"
	"time"

	"github.com/rs/zerolog"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
)

// drainRun is what one drain measured.
type drainRun struct {
	done     int           // tasks that succeeded
	span     time.Duration // first start to last end, database clock (Logs)
	wall     time.Duration // worker start to the last process's end (or the time bound)
	timedOut bool
	cost     dbCost // PostgreSQL only
}

// perSec is the drain's throughput: from the Logs span when it has one, which
// leaves out the worker's start-up, else from the wall clock.
func (d drainRun) perSec() float64 {
	switch {
	case d.done > 0 && d.span > 0:
		return float64(d.done) / d.span.Seconds()
	case d.wall > 0:
		return float64(d.done) / d.wall.Seconds()
	}
	return 0
}

// drain runs one in-process worker of the configured concurrency until every
// one of the processes has succeeded or the time bound passes, and reads what
// finished from Logs (the processes' names all start with prefix). On
// PostgreSQL it also measures the database's transactions and backend CPU from
// the worker's start to the last process's end.
func (r *runner) drain(ctx context.Context, t *target, dsn string, c *queue.Client, prefix string, processes []string) (drainRun, error) {
	cfg := r.cfg
	meter := r.beginCost(ctx, t, dbName(dsn))
	wc, err := queue.Open(ctx, dsn, queue.Config{Logger: zerolog.Nop()})
	if err != nil {
		return drainRun{}, fmt.Errorf("worker client: %w", err)
	}
	defer wc.Close()
	w, err := queue.NewWorker(wc, queue.WorkerConfig{Concurrency: cfg.Concurrency, ShutdownGrace: 2 * time.Second})
	if err != nil {
		return drainRun{}, fmt.Errorf("worker: %w", err)
	}
	if err := w.Handle(kindNoop, noopHandler); err != nil {
		return drainRun{}, fmt.Errorf("worker: %w", err)
	}
	bound, cancelBound := context.WithTimeout(ctx, cfg.Timeout)
	defer cancelBound()
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	runErr := make(chan error, 1)
	meter.startCPU(ctx)
	start := time.Now()
	// Labelled so that a CPU profile (stageq-bench -cpuprofile) can be cut to
	// one drain: go tool pprof -tagfocus drain=<prefix>.
	go pprof.Do(wctx, pprof.Labels("drain", prefix), func(ctx context.Context) { runErr <- w.Run(ctx) })

	var out drainRun
	var polls int64 // the bench's own transactions, left out of the count
	// A process row says when its last task left; reading it is one seek, so
	// polling costs the database next to nothing. Processes are checked in
	// order, and one that has succeeded is not read again.
	next := 0
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for next < len(processes) {
		select {
		case <-bound.Done():
			out.timedOut = true
			break wait
		case err := <-runErr:
			stop()
			meter.end(ctx, polls)
			return drainRun{}, fmt.Errorf("worker stopped early: %v", err)
		case <-tick.C:
			for next < len(processes) {
				polls++
				p, err := c.Dialect().ProcessGet(bound, processes[next])
				if err != nil || p.State != dialect.ProcessSucceeded {
					break
				}
				next++
			}
		}
	}
	out.wall = time.Since(start)
	meter.stopCPU(ctx)
	stop()
	if err := <-runErr; err != nil {
		return out, fmt.Errorf("worker: %w", err)
	}
	wc.Close() // its backends exit and flush their statistics
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	out.done, out.span, err = logSpan(rctx, c.Dialect().DB(), c.Dialect().Name(), prefix)
	out.cost = meter.end(rctx, polls+1) // +1: the Logs read
	return out, err
}
