package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

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

// acc gathers one row's figures over the runs; the row shows their medians.
type acc struct {
	rates []float64 // tasks/s
	xact  []float64 // transactions per task
	cpu   []float64 // PostgreSQL CPU µs per task
	wal   []float64 // WAL bytes per task
	why   []string  // why a cost figure is missing
}

// throughput runs the enqueue, drain and peer scenarios Runs times, each run
// in the order river, drain/noop (after enqueue/batch), drain/sql (after
// enqueue/file), drain/spread, so that River and stageq alternate, and returns
// a row per scenario with the medians.
func (r *runner) throughput(ctx context.Context, t *target) []Result {
	cfg := r.cfg
	peer := t.name == "postgres" && cfg.wants("river")
	ours := cfg.wants("drain") || cfg.wants("enqueue")
	spread := cfg.wants("drain")
	order := []string{"enqueue/batch", "enqueue/file"}
	if peer {
		order = append(order, "river")
	}
	order = append(order, "drain/noop", "drain/sql")
	if spread {
		order = append(order, "drain/spread")
	}
	rows := map[string]*Result{}
	accs := map[string]*acc{}
	for _, s := range order {
		rows[s] = &Result{Dialect: t.name, Scenario: s, N: cfg.N, Runs: cfg.Runs}
		accs[s] = &acc{}
	}
	for _, s := range []string{"drain/noop", "drain/sql", "drain/spread"} {
		if rows[s] != nil {
			rows[s].Concurrency = cfg.Concurrency
		}
	}
	if peer {
		rows["river"].Concurrency = riverWorkers
	}
	fail := func(s string, err error) { rows[s].Error = err.Error() }
	// enqueueThenDrain runs an enqueue row, whose enqueue puts N tasks of process
	// in the queue and says how long that took, and the drain row after it, in a
	// database of their own so that what a timed-out phase leaves behind cannot
	// leak into the next.
	enqueueThenDrain := func(run int, tag, enq, drain, process string, enqueue func(dsn string, c *queue.Client) (time.Duration, error)) {
		dsn, c, drop, err := t.migrated(ctx, tag)
		if err != nil {
			fail(enq, err)
			fail(drain, err)
			return
		}
		defer drop()
		el, err := enqueue(dsn, c)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				rows[enq].TimedOut = true
			}
			fail(enq, err)
			fail(drain, errors.New("nothing enqueued"))
			return
		}
		accs[enq].rates = append(accs[enq].rates, float64(cfg.N)/el.Seconds())
		r.cfg.progress("%s: %s run %d: %d tasks, concurrency %d", t.name, drain, run, cfg.N, cfg.Concurrency)
		d, err := r.drain(ctx, t, dsn, c, process, []string{process})
		if err != nil {
			fail(drain, err)
			return
		}
		recordDrain(rows[drain], accs[drain], d)
	}

	for run := 1; run <= cfg.Runs && ctx.Err() == nil; run++ {
		if peer {
			r.cfg.progress("%s: river run %d: river bench --num-total-jobs %d", t.name, run, cfg.N)
			rr, err := r.river(ctx, t)
			row := rows["river"]
			row.TimedOut = row.TimedOut || rr.timedOut
			if err != nil {
				fail("river", err)
			} else {
				a := accs["river"]
				a.rates = append(a.rates, rr.sum.perSec)
				rr.cost.perTask(int(rr.sum.worked), a)
				a.why = append(a.why, rr.cost.missing...)
				row.set("worked", rr.sum.worked)
				row.set("running_s", rr.sum.running.Seconds())
				rr.cost.setExtras(row)
				if rr.sum.worked < int64(cfg.N) {
					row.note("%d of %d jobs worked", rr.sum.worked, cfg.N)
				}
			}
		}
		if !ours {
			continue
		}
		// No-op tasks: the batch API, then a drain.
		noopProcess := fmt.Sprintf("drain-noop-%d", run)
		enqueueThenDrain(run, "drain_noop", "enqueue/batch", "drain/noop", noopProcess, func(_ string, c *queue.Client) (time.Duration, error) {
			plan := onePlan(noopProcess, kindNoop, "noop", cfg.N)
			r.cfg.progress("%s: enqueue/batch run %d: Submit of %d tasks", t.name, run, cfg.N)
			sctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
			defer cancel()
			start := time.Now()
			if _, err := c.Submit(sctx, plan); err != nil {
				return 0, fmt.Errorf("submit: %w", err)
			}
			return time.Since(start), nil
		})
		// SELECT 1 tasks: a plan file through the enqueue binary, then a drain.
		sqlProcess := fmt.Sprintf("drain-sql-%d", run)
		enqueueThenDrain(run, "drain_sql", "enqueue/file", "drain/sql", sqlProcess, func(dsn string, _ *queue.Client) (time.Duration, error) {
			r.cfg.progress("%s: enqueue/file run %d: enqueue --file with %d tasks", t.name, run, cfg.N)
			return r.enqueueFile(ctx, dsn, onePlan(sqlProcess, "", "SELECT 1", cfg.N))
		})
		if spread {
			if err := r.spreadDrain(ctx, t, run, rows["drain/spread"], accs["drain/spread"]); err != nil {
				fail("drain/spread", err)
			}
		}
	}

	return summarize(cfg, order, rows, accs, peer)
}

// summarize turns the runs' figures into the rows, in order: medians of the
// runs, and each drain's ratio to River's median when the peer ran.
func summarize(cfg Config, order []string, rows map[string]*Result, accs map[string]*acc, peer bool) []Result {
	var out []Result
	for _, s := range order {
		row, a := rows[s], accs[s]
		if len(a.rates) > 0 {
			row.TasksPerSec = median(a.rates)
			row.Summary = thousands(row.TasksPerSec) + " tasks/s"
			if len(a.rates) > 1 {
				row.Summary += fmt.Sprintf(" (median of %d)", len(a.rates))
			}
			row.Error = ""
		}
		// Only when every run has a rate: after a failed run the list's
		// places would no longer be run numbers.
		if len(a.rates) > 1 && len(a.rates) == cfg.Runs {
			row.set("runs_tasks_per_s", roundAll(a.rates, 0))
		}
		row.XactPerTask = median(a.xact)
		row.PGCPUPerTaskUs = median(a.cpu)
		row.WALPerTask = median(a.wal)
		if len(a.rates) > 0 && (len(a.xact) == 0 || len(a.cpu) == 0 || len(a.wal) == 0) {
			for _, why := range slices.Compact(slices.Sorted(slices.Values(a.why))) {
				row.note("%s", why)
			}
		}
		switch s {
		case "enqueue/file":
			row.note("includes the enqueue process's start, schema check and plan parse")
		case "river":
			row.note("River v0.47.0 `river bench` (its %d workers, its own clock from client start to last job); its transactions include its inserts", riverWorkers)
		case "drain/spread":
			row.note("%d processes of ~%d tasks each, fair share", min(cfg.SpreadProcesses, cfg.N), cfg.N/min(cfg.SpreadProcesses, cfg.N))
		}
		out = append(out, *row)
	}
	// Every drain is compared with River's burn-down of the same number of jobs:
	// the medians, and run by run with the River run beside it, so that a
	// reader sees how far the ratio moves between runs, not only its middle.
	if peer {
		river := rows["river"].TasksPerSec
		for i := range out {
			if strings.HasPrefix(out[i].Scenario, "drain/") && river > 0 && out[i].TasksPerSec > 0 {
				out[i].RiverTasksPerSec = river
				out[i].VsRiver = out[i].TasksPerSec / river
				if ratios := runRatios(accs[out[i].Scenario].rates, accs["river"].rates, cfg.Runs); len(ratios) > 1 {
					out[i].set("runs_vs_river", ratios)
				}
			}
		}
	}
	return out
}

// runRatios divides each run's rate by the peer's rate of the same run, when
// both scenarios have a rate for every one of the runs (after a failed run
// the two lists would pair the wrong runs); nil otherwise.
func runRatios(ours, peer []float64, runs int) []float64 {
	if len(ours) != runs || len(peer) != runs {
		return nil
	}
	out := make([]float64, len(ours))
	for i := range ours {
		if peer[i] <= 0 {
			return nil
		}
		out[i] = ours[i] / peer[i]
	}
	return roundAll(out, 2)
}

// roundAll rounds each figure to the given number of decimals, for the JSON.
func roundAll(xs []float64, decimals int) []float64 {
	scale := math.Pow(10, float64(decimals))
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = math.Round(x*scale) / scale
	}
	return out
}

// spreadDrain enqueues N no-op tasks split evenly over SpreadProcesses
// processes and drains them with one worker: the fair-share decision at work.
func (r *runner) spreadDrain(ctx context.Context, t *target, run int, row *Result, a *acc) error {
	cfg := r.cfg
	dsn, c, drop, err := t.migrated(ctx, "drain_spread")
	if err != nil {
		return err
	}
	defer drop()
	prefix := fmt.Sprintf("drain-spread-%d-", run)
	names := spreadNames(prefix, cfg.SpreadProcesses, cfg.N)
	r.cfg.progress("%s: drain/spread run %d: %d tasks over %d processes, concurrency %d", t.name, run, cfg.N, len(names), cfg.Concurrency)
	sctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	for i, n := range spreadSizes(len(names), cfg.N) {
		if _, err := c.Submit(sctx, onePlan(names[i], kindNoop, "noop", n)); err != nil {
			return fmt.Errorf("submit %s: %w", names[i], err)
		}
	}
	r.cfg.progress("%s: drain/spread run %d: enqueued; draining", t.name, run)
	d, err := r.drain(ctx, t, dsn, c, prefix, names)
	if err != nil {
		return err
	}
	recordDrain(row, a, d)
	return nil
}

// spreadSizes splits n tasks over k processes (k <= n), the first n%k
// processes taking one more.
func spreadSizes(k, n int) []int {
	out := make([]int, k)
	for i := range out {
		out[i] = n / k
		if i < n%k {
			out[i]++
		}
	}
	return out
}

// spreadNames names min(k, n) processes, zero-padded so that they sort.
func spreadNames(prefix string, k, n int) []string {
	k = min(k, n)
	width := len(fmt.Sprint(k - 1))
	out := make([]string, k)
	for i := range out {
		out[i] = fmt.Sprintf("%s%0*d", prefix, width, i)
	}
	return out
}

// recordDrain adds one drain's figures to its row.
func recordDrain(row *Result, a *acc, d drainRun) {
	a.rates = append(a.rates, d.perSec())
	d.cost.perTask(d.done, a)
	a.why = append(a.why, d.cost.missing...)
	row.TimedOut = row.TimedOut || d.timedOut
	row.set("done", d.done)
	row.set("logs_span_s", d.span.Seconds())
	row.set("wall_s", d.wall.Seconds())
	if d.done > 0 && d.wall > 0 {
		row.set("wall_tasks_per_s", float64(d.done)/d.wall.Seconds())
	}
	d.cost.setExtras(row)
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
