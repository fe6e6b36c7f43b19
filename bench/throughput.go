package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// kindNoop is the Go handler that does nothing: drain/noop measures the queue alone.
const kindNoop = "noop"

// noopHandler is the no-op task.
func noopHandler(context.Context, *queue.Task) error { return nil }

// onePlan is a plan of n identical tasks in one stage of one process.
func onePlan(process, kind, body string, n int) stages.Plan {
	order := 0
	tasks := make([]stages.Task, n)
	for i := range tasks {
		tasks[i] = stages.Task{Kind: kind, Body: body}
	}
	return stages.Plan{Process: process, Stages: []stages.Stage{{Order: &order, Tasks: tasks}}}
}

// drainRun is what one drain measured.
type drainRun struct {
	done     int           // tasks that succeeded
	span     time.Duration // first start to last end, database clock (Logs)
	wall     time.Duration // worker start to the process's end (or the time bound)
	timedOut bool
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

// drain runs one in-process worker of the given concurrency until the process
// has succeeded or the time bound passes, and reads what finished from Logs.
func drain(ctx context.Context, cfg Config, dsn string, c *queue.Client, process string) (drainRun, error) {
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
	start := time.Now()
	go func() { runErr <- w.Run(wctx) }()

	var out drainRun
	// The process row says when the last task left; reading it is one seek, so
	// polling it costs the database next to nothing.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-bound.Done():
			out.timedOut = true
			break wait
		case err := <-runErr:
			stop()
			return drainRun{}, fmt.Errorf("worker stopped early: %v", err)
		case <-tick.C:
			p, err := c.Dialect().ProcessGet(bound, process)
			if err == nil && p.State == dialect.ProcessSucceeded {
				break wait
			}
		}
	}
	out.wall = time.Since(start)
	stop()
	if err := <-runErr; err != nil {
		return out, fmt.Errorf("worker: %w", err)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	out.done, out.span, err = logSpan(rctx, c.Dialect().DB(), c.Dialect().Name(), process)
	return out, err
}

// throughput runs the enqueue and drain scenarios Runs times and returns four
// rows: enqueue/batch, enqueue/file, drain/noop, drain/sql.
func (r *runner) throughput(ctx context.Context, t *target) []Result {
	cfg := r.cfg
	rows := map[string]*Result{}
	order := []string{"enqueue/batch", "enqueue/file", "drain/noop", "drain/sql"}
	for _, s := range order {
		rows[s] = &Result{Dialect: t.name, Scenario: s, N: cfg.N, Runs: cfg.Runs}
	}
	rows["drain/noop"].Concurrency = cfg.Concurrency
	rows["drain/sql"].Concurrency = cfg.Concurrency
	rates := map[string][]float64{}
	fail := func(s string, err error) { rows[s].Error = err.Error() }

	for run := 1; run <= cfg.Runs; run++ {
		// No-op tasks: the batch API, then a drain, in a database of their own so
		// that what a timed-out phase leaves behind cannot leak into the next.
		func() {
			dsn, c, drop, err := t.migrated(ctx, "drain_noop")
			if err != nil {
				fail("enqueue/batch", err)
				fail("drain/noop", err)
				return
			}
			defer drop()
			process := fmt.Sprintf("drain-noop-%d", run)
			plan := onePlan(process, kindNoop, "noop", cfg.N)
			r.cfg.progress("%s: enqueue/batch run %d: Submit of %d tasks", t.name, run, cfg.N)
			sctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
			start := time.Now()
			_, err = c.Submit(sctx, plan)
			el := time.Since(start)
			cancel()
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					rows["enqueue/batch"].TimedOut = true
				}
				fail("enqueue/batch", fmt.Errorf("submit: %w", err))
				fail("drain/noop", errors.New("nothing enqueued"))
				return
			}
			rates["enqueue/batch"] = append(rates["enqueue/batch"], float64(cfg.N)/el.Seconds())
			r.cfg.progress("%s: drain/noop run %d: %d tasks, concurrency %d", t.name, run, cfg.N, cfg.Concurrency)
			d, err := drain(ctx, cfg, dsn, c, process)
			if err != nil {
				fail("drain/noop", err)
				return
			}
			r.recordDrain(rows["drain/noop"], d, rates)
		}()
		// SELECT 1 tasks: a plan file through the enqueue binary, then a drain.
		func() {
			dsn, c, drop, err := t.migrated(ctx, "drain_sql")
			if err != nil {
				fail("enqueue/file", err)
				fail("drain/sql", err)
				return
			}
			defer drop()
			process := fmt.Sprintf("drain-sql-%d", run)
			r.cfg.progress("%s: enqueue/file run %d: enqueue --file with %d tasks", t.name, run, cfg.N)
			el, err := r.enqueueFile(ctx, dsn, onePlan(process, "", "SELECT 1", cfg.N))
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					rows["enqueue/file"].TimedOut = true
				}
				fail("enqueue/file", err)
				fail("drain/sql", errors.New("nothing enqueued"))
				return
			}
			rates["enqueue/file"] = append(rates["enqueue/file"], float64(cfg.N)/el.Seconds())
			r.cfg.progress("%s: drain/sql run %d: %d tasks, concurrency %d", t.name, run, cfg.N, cfg.Concurrency)
			d, err := drain(ctx, cfg, dsn, c, process)
			if err != nil {
				fail("drain/sql", err)
				return
			}
			r.recordDrain(rows["drain/sql"], d, rates)
		}()
	}

	var out []Result
	for _, s := range order {
		row := rows[s]
		if xs := rates[s]; len(xs) > 0 {
			row.TasksPerSec = median(xs)
			row.Summary = thousands(row.TasksPerSec) + " tasks/s"
			if len(xs) > 1 {
				row.Summary += fmt.Sprintf(" (median of %d)", len(xs))
			}
			row.Error = ""
		}
		if s == "enqueue/file" {
			row.note("includes the enqueue process's start, schema check and plan parse")
		}
		out = append(out, *row)
	}
	return out
}

// recordDrain adds one drain's figures to its row.
func (r *runner) recordDrain(row *Result, d drainRun, rates map[string][]float64) {
	rates[row.Scenario] = append(rates[row.Scenario], d.perSec())
	row.TimedOut = row.TimedOut || d.timedOut
	row.set("done", d.done)
	row.set("logs_span_s", d.span.Seconds())
	row.set("wall_s", d.wall.Seconds())
	if d.done > 0 && d.wall > 0 {
		row.set("wall_tasks_per_s", float64(d.done)/d.wall.Seconds())
	}
	if d.timedOut {
		row.note("%d of %d done in %s", d.done, row.N, d.wall.Round(time.Second))
	}
}

// enqueueFile writes the plan as a JSON file and times `enqueue --file` on it.
func (r *runner) enqueueFile(ctx context.Context, dsn string, p stages.Plan) (time.Duration, error) {
	bin, err := r.binary(ctx, "enqueue")
	if err != nil {
		return 0, err
	}
	f, err := os.CreateTemp("", "stageq-bench-plan-*.json")
	if err != nil {
		return 0, fmt.Errorf("plan file: %w", err)
	}
	defer os.Remove(f.Name())
	if err := json.NewEncoder(f).Encode(p); err != nil {
		f.Close()
		return 0, fmt.Errorf("write plan file: %w", err)
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("write plan file: %w", err)
	}
	ectx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ectx, bin, "--dsn", dsn, "--file", f.Name(), "--json")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	el := time.Since(start)
	if err != nil {
		if ectx.Err() != nil {
			return 0, fmt.Errorf("%s --file: %w", filepath.Base(bin), ectx.Err())
		}
		return 0, fmt.Errorf("%s --file: %w: %s", filepath.Base(bin), err, lastLine(out))
	}
	return el, nil
}
