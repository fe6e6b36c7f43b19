package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// kindPickup's handler reports the moment it is entered.
const kindPickup = "pickup"

// startWorker runs an in-process worker on its own client (its own pool, as a
// separate worker process would have) until the returned stop is called.
func startWorker(ctx context.Context, dsn string, wcfg queue.WorkerConfig, handlers map[string]queue.Handler) (stop func() error, err error) {
	wc, err := queue.Open(ctx, dsn, queue.Config{Logger: zerolog.Nop()})
	if err != nil {
		return nil, fmt.Errorf("worker client: %w", err)
	}
	if wcfg.ShutdownGrace == 0 {
		wcfg.ShutdownGrace = 2 * time.Second
	}
	w, err := queue.NewWorker(wc, wcfg)
	if err != nil {
		wc.Close()
		return nil, fmt.Errorf("worker: %w", err)
	}
	for k, h := range handlers {
		if err := w.Handle(k, h); err != nil {
			wc.Close()
			return nil, fmt.Errorf("worker: %w", err)
		}
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	return func() error {
		cancel()
		err := <-done
		wc.Close()
		return err
	}, nil
}

// idleWorker creates a database for a latency scenario and starts one worker
// of concurrency 4 on it, then lets the worker register and reach its idle wait
// so that the first sample does not time its start. stop stops the worker, then
// drops the database.
func (t *target) idleWorker(ctx context.Context, tag string, handlers map[string]queue.Handler) (c *queue.Client, stop func(), err error) {
	dsn, c, drop, err := t.migrated(ctx, tag)
	if err != nil {
		return nil, nil, err
	}
	stopWorker, err := startWorker(ctx, dsn, queue.WorkerConfig{Concurrency: 4}, handlers)
	if err != nil {
		drop()
		return nil, nil, err
	}
	time.Sleep(500 * time.Millisecond)
	return c, func() { stopWorker(); drop() }, nil
}

// latencyRounds runs the rounds of a latency scenario, at most rounds of them
// and none begun after cfg.Timeout, on one idle worker with handlers
// (idleWorker), then fills res's sample count and percentiles. Round i returns
// its samples, and false to end the scenario (having set res's Error or
// TimedOut). A worker that does not start is res's Error, and false. Once the
// worker runs, it prints what the rounds measure as progress.
func (r *runner) latencyRounds(ctx context.Context, t *target, res *Result, handlers map[string]queue.Handler, rounds int, what string,
	round func(c *queue.Client, i int, deadline time.Time) ([]time.Duration, bool)) (ran bool) {
	c, stop, err := t.idleWorker(ctx, res.Scenario, handlers)
	if err != nil {
		res.Error = err.Error()
		return false
	}
	defer stop()

	r.cfg.progress("%s: %s: %s", t.name, res.Scenario, what)
	deadline := time.Now().Add(r.cfg.Timeout)
	var samples []time.Duration
	for i := 0; i < rounds && time.Now().Before(deadline); i++ {
		got, more := round(c, i, deadline)
		samples = append(samples, got...)
		if !more {
			break
		}
	}
	res.Samples = len(samples)
	r.latencySummary(res, samples)
	return true
}

// pickup measures, PickupSamples times, the time from Submit's return (the
// enqueue has committed) to the entry of the task's handler, with one worker
// idle in between. Both instants are this process's monotonic clock.
func (r *runner) pickup(ctx context.Context, t *target) Result {
	cfg := r.cfg
	res := Result{Dialect: t.name, Scenario: "pickup", Concurrency: 4}
	type entry struct {
		i  int
		at time.Time
	}
	entered := make(chan entry, 64)
	handlers := map[string]queue.Handler{
		kindPickup: func(_ context.Context, task *queue.Task) error {
			at := time.Now()
			i, _ := strconv.Atoi(task.Body)
			select {
			case entered <- entry{i, at}:
			default:
			}
			return nil
		},
	}
	misses := 0
	ran := r.latencyRounds(ctx, t, &res, handlers, cfg.PickupSamples, fmt.Sprintf("%d samples", cfg.PickupSamples), func(c *queue.Client, i int, deadline time.Time) ([]time.Duration, bool) {
		time.Sleep(cfg.PickupGap)
		order := 0
		plan := stages.Plan{Process: "pickup", Stages: []stages.Stage{{Order: &order,
			Tasks: []stages.Task{{Kind: kindPickup, Body: strconv.Itoa(i)}}}}}
		if _, err := c.Submit(ctx, plan); err != nil {
			res.Error = fmt.Sprintf("submit: %v", err)
			return nil, false
		}
		committed := time.Now()
		timer := time.NewTimer(time.Until(deadline) + time.Second)
		defer timer.Stop()
		for {
			select {
			case e := <-entered:
				if e.i == i { // an earlier timed-out sample may arrive late
					// The worker can start the task before Submit has returned
					// to us (the commit is what wakes it): that is a pickup of 0.
					return []time.Duration{max(e.at.Sub(committed), 0)}, true
				}
			case <-timer.C:
				misses++
				return nil, true
			}
		}
	})
	if !ran {
		return res
	}
	if res.Samples < cfg.PickupSamples {
		res.TimedOut = true
	}
	if misses > 0 {
		res.note("%d samples never picked up in time", misses)
	}
	res.note("gap %s before each task", cfg.PickupGap)
	return res
}

// handoff submits HandoffPlans plans of three stages of HandoffWidth tasks, one
// at a time, and measures from the last end of a stage to the first start of the
// next (Logs' ended_at and started_at, both the database's clock).
func (r *runner) handoff(ctx context.Context, t *target) Result {
	cfg := r.cfg
	res := Result{Dialect: t.name, Scenario: "handoff", Concurrency: 4}
	handlers := map[string]queue.Handler{kindNoop: noopHandler}
	what := fmt.Sprintf("%d plans of 3 stages x %d tasks", cfg.HandoffPlans, cfg.HandoffWidth)
	ran := r.latencyRounds(ctx, t, &res, handlers, cfg.HandoffPlans, what, func(c *queue.Client, i int, deadline time.Time) ([]time.Duration, bool) {
		process := fmt.Sprintf("handoff-%d", i)
		var plan stages.Plan
		plan.Process = process
		for s := 1; s <= 3; s++ {
			order := s * 100
			st := stages.Stage{Order: &order}
			for range cfg.HandoffWidth {
				st.Tasks = append(st.Tasks, stages.Task{Kind: kindNoop, Body: "noop"})
			}
			plan.Stages = append(plan.Stages, st)
		}
		if _, err := c.Submit(ctx, plan); err != nil {
			res.Error = fmt.Sprintf("submit: %v", err)
			return nil, false
		}
		if !waitSucceeded(ctx, c, process, deadline) {
			res.TimedOut = true
			return nil, false
		}
		logs, err := c.Logs(ctx, dialect.LogFilter{Process: process})
		if err != nil {
			res.Error = fmt.Sprintf("logs: %v", err)
			return nil, false
		}
		return handoffs(logs), true
	})
	if !ran {
		return res
	}
	res.note("%d plans x 2 handoffs, %d tasks per stage", cfg.HandoffPlans, cfg.HandoffWidth)
	return res
}

// handoffs returns, for each pair of consecutive stages in one process's Logs,
// the first start of the later stage minus the last end of the earlier one.
func handoffs(logs []dialect.LogEntry) []time.Duration {
	lastEnd := map[int]time.Time{}
	firstStart := map[int]time.Time{}
	var orders []int
	for _, l := range logs {
		if _, seen := firstStart[l.Order]; !seen {
			orders = append(orders, l.Order)
			firstStart[l.Order] = l.StartedAt
		}
		if l.StartedAt.Before(firstStart[l.Order]) {
			firstStart[l.Order] = l.StartedAt
		}
		if l.EndedAt != nil && l.EndedAt.After(lastEnd[l.Order]) {
			lastEnd[l.Order] = *l.EndedAt
		}
	}
	var out []time.Duration
	for i := 1; i < len(orders); i++ {
		prev, cur := orders[i-1], orders[i]
		if end, ok := lastEnd[prev]; ok && prev < cur {
			out = append(out, firstStart[cur].Sub(end))
		}
	}
	return out
}

// waitSucceeded polls the process row until it has succeeded or the deadline passes.
func waitSucceeded(ctx context.Context, c *queue.Client, process string, deadline time.Time) bool {
	for time.Now().Before(deadline) {
		p, err := c.Dialect().ProcessGet(ctx, process)
		if err == nil && p.State == dialect.ProcessSucceeded {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return false
}

// latencySummary fills a latency row's percentiles and summary.
func (r *runner) latencySummary(res *Result, samples []time.Duration) {
	if len(samples) == 0 {
		if res.Error == "" {
			res.Error = "no samples"
		}
		return
	}
	p50, p99 := percentile(samples, 50), percentile(samples, 99)
	res.P50Ms, res.P99Ms = ms(p50), ms(p99)
	res.set("max_ms", ms(percentile(samples, 100)))
	res.set("min_ms", ms(percentile(samples, 0)))
	res.Summary = fmt.Sprintf("p50 %.2f ms, p99 %.2f ms (%d samples)", res.P50Ms, res.P99Ms, len(samples))
}
