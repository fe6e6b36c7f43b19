package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/stageq/stageq/dashboard"
	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
)

// Exit codes of the operator commands, beyond ExitOK, ExitFailure and ExitUsage,
// so scripts can tell what went wrong without parsing messages.
const (
	ExitNotFound      = 3 // the named process, task or limit does not exist
	ExitWrongState    = 4 // not allowed in the current state (retry of a running task, …)
	ExitProcessFailed = 5 // --wait / --watch: the process ended with a failed task, or was cancelled
	// ExitInterrupted: --wait / --watch stopped following before the process
	// ended (SIGINT, SIGTERM), as a shell reports a command that SIGINT ended.
	ExitInterrupted = 130
)

// opError maps the dialect's sentinel errors to exit codes.
func opError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, dialect.ErrInvalid):
		return UsageError{err}
	case errors.Is(err, dialect.ErrNotFound):
		return exitCodeError{code: ExitNotFound, err: err}
	case errors.Is(err, dialect.ErrWrongState):
		return exitCodeError{code: ExitWrongState, err: err}
	}
	return err
}

// statusReport is what `status --json` prints.
type statusReport struct {
	Processes []dialect.ProcessStatus `json:"processes"`
	Workers   []workerReport          `json:"workers"`
	Limits    []dialect.LimitInfo     `json:"limits"`
	Schedules []dialect.ScheduleInfo  `json:"schedules"`
	Leases    []dialect.LeaseInfo     `json:"leases"`
	// Retention is the latest prune pass (absent before the first).
	Retention *dialect.PruneStatus `json:"retention,omitempty"`
}

type workerReport struct {
	dialect.WorkerStatus
	State string `json:"state"` // alive, dead or stopped
}

func newStatusCommand(dsn *string) *cobra.Command {
	var (
		name               string // the PROCESS argument, if any
		all, asJSON, watch bool
		interval, deadAt   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status [PROCESS]",
		Short: "Show processes with per-stage progress, workers alive and dead, and limits in use",
		Long: `Without arguments: every open process, active or failed (--all adds the succeeded and cancelled ones)
with its state and per-stage counts (pending / running / failed / done), the
workers with their last heartbeat, and the limits with their slots in use.

With PROCESS and --watch: follow the process to its end, with a progress bar per
stage on a terminal and a line per change otherwise. Exit code 0 when it
succeeded, 5 when a task failed for good or the process was cancelled, 3 when
the process does not exist.`,
		Example: `  queuectl status
  queuectl status nightly --json
  queuectl status nightly --watch`,
		Args: cobra.MaximumNArgs(1),
		PreRunE: func(_ *cobra.Command, args []string) error { // bad input, before any connection
			if len(args) == 1 {
				name = args[0]
			}
			if watch && name == "" {
				return usageErrorf("--watch follows one process: give its name")
			}
			if interval <= 0 || deadAt <= 0 {
				return usageErrorf("--interval and --dead-after must be positive")
			}
			return nil
		},
		RunE: withClient(dsn, func(cmd *cobra.Command, _ []string, c *queue.Client) error {
			op, err := dialect.AsOperator(c.Dialect())
			if err != nil {
				return err
			}
			if watch {
				return follow(cmd.Context(), op, name, cmd.OutOrStdout(), interval, asJSON, waitNote(c.Dialect(), name, deadAt))
			}
			return printStatus(cmd.Context(), op, cmd.OutOrStdout(), dialect.ProcessFilter{Name: name, All: all}, deadAt, asJSON)
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&all, "all", false, "include processes that succeeded")
	jsonFlag(cmd, &asJSON)
	f.BoolVar(&watch, "watch", false, "follow PROCESS to its end with a live progress bar per stage")
	f.DurationVar(&interval, "interval", 500*time.Millisecond, "how often --watch refreshes")
	f.DurationVar(&deadAt, "dead-after", time.Minute, "a worker whose last heartbeat is older than this is shown dead")
	return cmd
}

func printStatus(ctx context.Context, op dialect.Operator, w io.Writer, f dialect.ProcessFilter, deadAfter time.Duration, asJSON bool) error {
	procs, err := op.ProcessList(ctx, f)
	if err != nil {
		return opError(err)
	}
	workers, err := op.WorkerList(ctx)
	if err != nil {
		return err
	}
	limits, err := op.LimitList(ctx)
	if err != nil {
		return err
	}
	rep := statusReport{Processes: procs, Limits: limits, Workers: make([]workerReport, len(workers))}
	for i, wk := range workers {
		state := "alive"
		switch {
		case wk.StoppedAt != nil:
			state = "stopped"
		case wk.Now.Sub(wk.HeartbeatAt) > deadAfter:
			state = "dead"
		}
		rep.Workers[i] = workerReport{WorkerStatus: wk, State: state}
	}
	if rep.Processes == nil {
		rep.Processes = []dialect.ProcessStatus{}
	}
	if pr, ok := op.(dialect.Pruner); ok {
		st, ok, err := pr.PruneLast(ctx)
		if err != nil {
			return err
		}
		if ok {
			rep.Retention = &st
		}
	}
	if asJSON {
		if sch, ok := op.(dialect.Scheduler); ok {
			if rep.Schedules, err = sch.ScheduleList(ctx, dialect.ScheduleFilter{}); err != nil {
				return err
			}
			if rep.Leases, err = sch.LeaseList(ctx, dialect.LeaseFilter{HeldOnly: true}); err != nil {
				return err
			}
		}
		return writeJSON(w, rep)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tSTATE\tPRIO\tWEIGHT\tMAX\tORDER\tPENDING\tRUNNING\tFAILED\tDONE")
	for _, p := range rep.Processes {
		maxPar := "-"
		if p.MaxParallel != nil {
			maxPar = fmt.Sprint(*p.MaxParallel)
		}
		state := p.State
		if p.Paused {
			state += " (paused)"
		}
		if len(p.Stages) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t-\t0\t0\t0\t0\n", cell(p.Name, 40), state, p.Priority, p.Weight, maxPar)
		}
		for i, s := range p.Stages {
			if i == 0 {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s", cell(p.Name, 40), state, p.Priority, p.Weight, maxPar)
			} else {
				fmt.Fprint(tw, "\t\t\t\t")
			}
			fmt.Fprintf(tw, "\t%d\t%d\t%d\t%d\t%d\n", s.Order, s.Pending, s.Running, s.Failed, s.Done)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tSTATE\tHOST\tPID\tRUNNING\tCONCURRENCY\tLAST HEARTBEAT")
	for _, wk := range rep.Workers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s ago\n", cell(wk.ID, 60), wk.State, cell(wk.Hostname, 40), wk.PID, wk.Running,
			wk.Concurrency, wk.Now.Sub(wk.HeartbeatAt).Round(time.Second))
	}
	tw.Flush()
	fmt.Fprintln(w)
	if err := printLimits(w, rep.Limits); err != nil {
		return err
	}
	printRetention(w, op, rep.Retention)
	if sch, ok := op.(dialect.Scheduler); ok {
		// Next runs of the schedules, and who holds which exclusive lease.
		fmt.Fprintln(w)
		return printSchedulerStatus(ctx, sch, w)
	}
	return nil
}

// stuckAfter is how long a followed process may show no change, with nothing
// running, before follow says why its next task waits.
var stuckAfter = 10 * time.Second

// waitNote says why the first task of a process that could run (else its
// first task) is not running: follow prints it when the process has stood still, so that a task
// no live worker can run (its kind, a full limit, a pause) does not leave
// --wait silent for ever. Nil where the dialect cannot explain.
func waitNote(d dialect.Dialect, name string, deadAfter time.Duration) func(context.Context) string {
	in, err := dialect.AsInspector(d)
	if err != nil {
		return nil
	}
	return func(ctx context.Context) string {
		// A task that could run now and does not, before any other: in a
		// failed process the first task is most often the failed one.
		var ts []dialect.TaskInfo
		for _, state := range []string{dialect.StateAvailable, dialect.StateScheduled, ""} {
			var err error
			if ts, err = d.TaskList(ctx, dialect.TaskFilter{Process: name, State: state, Limit: 1}); err != nil {
				return ""
			}
			if len(ts) > 0 {
				break
			}
		}
		if len(ts) == 0 {
			return ""
		}
		tw, err := in.TaskWait(ctx, ts[0].ID, deadAfter)
		if err != nil {
			return ""
		}
		var why []string
		for _, r := range dashboard.Explain(tw) {
			why = append(why, r.Text)
		}
		return fmt.Sprintf("task %d waits: %s (queuectl why %d)", ts[0].ID, strings.Join(why, " "), ts[0].ID)
	}
}

// follow polls a process until it succeeds or fails, drawing a progress bar per
// stage on a terminal and printing a line per change otherwise (or, with asJSON,
// one JSON object per change). When the process stands still with nothing
// running for stuckAfter, it says once why it waits (note, when not nil).
func follow(ctx context.Context, op dialect.Operator, name string, w io.Writer, interval time.Duration, asJSON bool, note func(context.Context) string) error {
	f, isFile := w.(*os.File)
	tty := isFile && isatty.IsTerminal(f.Fd()) && !asJSON
	var (
		progress *mpb.Progress
		bars     = map[int]*mpb.Bar{}
		last     string
		mu       sync.Mutex // guards current, read by the bars' decorators
		current  = map[int]dialect.StageStatus{}
	)
	if tty {
		progress = mpb.NewWithContext(ctx, mpb.WithOutput(w), mpb.WithWidth(40))
	}
	finish := func() {
		if progress == nil {
			return
		}
		for _, b := range bars {
			if !b.Completed() {
				b.Abort(false)
			}
		}
		progress.Wait()
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var (
		stillFrom time.Time // since when the process has stood still (last unchanged)
		asked     bool      // whether note was asked while it has
		noted     string    // the last note printed
	)
	unreachable := false // the database is out of reach (restarting, down); said once
	for {
		ps, err := op.ProcessList(ctx, dialect.ProcessFilter{Name: name})
		if err == nil && unreachable {
			unreachable = false
			fmt.Fprintln(os.Stderr, time.Now().Format(time.TimeOnly), "the database answers again")
		}
		if err != nil && ctx.Err() == nil && dialect.Unreachable(err) {
			if !unreachable {
				unreachable = true
				fmt.Fprintln(os.Stderr, time.Now().Format(time.TimeOnly), "the database is out of reach, waiting on:", err)
			}
			select {
			case <-ctx.Done():
			case <-ticker.C:
			}
			continue
		}
		if err != nil {
			finish()
			if ctx.Err() != nil {
				return exitCodeError{code: ExitInterrupted, err: fmt.Errorf("stopped following process %q: %w", name, ctx.Err())}
			}
			return opError(err)
		}
		p := ps[0]
		line := summary(p)
		changed := line != last
		if changed {
			last, stillFrom, asked = line, time.Now(), false
		}
		switch {
		case tty:
			mu.Lock()
			for _, s := range p.Stages {
				current[s.Order] = s
			}
			mu.Unlock()
			for _, s := range p.Stages {
				b, ok := bars[s.Order]
				if !ok {
					b = progress.AddBar(int64(s.Total()),
						mpb.PrependDecorators(decor.Name(fmt.Sprintf("stage %-6d", s.Order))),
						mpb.AppendDecorators(decor.CountersNoUnit("%d/%d"), decor.Any(stageNote(&mu, current, s.Order), decor.WCSyncSpaceR)))
					bars[s.Order] = b
				}
				b.SetTotal(int64(s.Total()), false)
				b.SetCurrent(int64(s.Done))
				if s.Pending+s.Running+s.Failed == 0 {
					b.SetTotal(-1, true)
				}
			}
		case changed && asJSON:
			if err := writeJSONLine(w, p); err != nil {
				return err
			}
		case changed:
			fmt.Fprintln(w, time.Now().Format(time.TimeOnly), line)
		}
		if !changed && !asked && note != nil && !asJSON && time.Since(stillFrom) >= stuckAfter && !p.Settled() && running(p) == 0 {
			asked = true // once while it stands still: a note costs several reads
			if n := note(ctx); n != "" && n != noted {
				out := w
				if progress != nil {
					out = progress // printed above the bars
				}
				fmt.Fprintln(out, time.Now().Format(time.TimeOnly), n)
				noted = n
			}
		}
		switch {
		case !p.Settled():
		case p.State == dialect.ProcessSucceeded:
			finish()
			if !asJSON {
				fmt.Fprintf(w, "process %q succeeded\n", name)
			}
			return nil
		case p.State == dialect.ProcessCancelled:
			finish()
			return exitCodeError{code: ExitProcessFailed, err: fmt.Errorf("process %q was cancelled: an operator cancelled or discarded its remaining tasks (see `queuectl logs --process %s --newest`)", name, cell(name, 0))}
		case p.State == dialect.ProcessFailed:
			finish()
			return exitCodeError{code: ExitProcessFailed, err: fmt.Errorf("process %q failed: a task failed for good (see `queuectl tasks --process %s --state failed`, then retry or discard it)", name, cell(name, 0))}
		}
		select {
		case <-ctx.Done():
			finish()
			return exitCodeError{code: ExitInterrupted, err: fmt.Errorf("stopped following process %q: %w", name, ctx.Err())}
		case <-ticker.C:
		}
	}
}

// stageNote is a bar's live note: what is running, waiting and failed.
func stageNote(mu *sync.Mutex, current map[int]dialect.StageStatus, order int) func(decor.Statistics) string {
	return func(decor.Statistics) string {
		mu.Lock()
		s := current[order]
		mu.Unlock()
		return fmt.Sprintf(" running %d, pending %d, failed %d", s.Running, s.Pending, s.Failed)
	}
}

// summary is a one-line view of a process's progress, for plain output.
func summary(p dialect.ProcessStatus) string {
	parts := make([]string, 0, len(p.Stages))
	for _, s := range p.Stages {
		parts = append(parts, fmt.Sprintf("stage %d: %d/%d done, %d running, %d pending, %d failed",
			s.Order, s.Done, s.Total(), s.Running, s.Pending, s.Failed))
	}
	if len(parts) == 0 { // nothing left in the queue, nothing done
		return fmt.Sprintf("process %s %s", cell(p.Name, 0), p.State)
	}
	return fmt.Sprintf("process %s %s; %s", cell(p.Name, 0), p.State, strings.Join(parts, "; "))
}

// printRetention says what the workers' pruners keep and did last.
func printRetention(w io.Writer, op dialect.Operator, st *dialect.PruneStatus) {
	if _, ok := op.(dialect.Pruner); !ok {
		return
	}
	if st == nil {
		fmt.Fprintln(w, "\nretention: no prune pass yet (every worker prunes; see worker --retain-logs)")
		return
	}
	keep := func(d time.Duration) string {
		if d <= 0 {
			return "for ever"
		}
		if d%(24*time.Hour) == 0 {
			return fmt.Sprintf("%dd", d/(24*time.Hour))
		}
		return d.String()
	}
	fmt.Fprintf(w, "\nretention: logs %s, workers %s, finished processes %s; last pass %s by %s deleted %d logs, %d workers, %d processes\n",
		keep(st.RetainLogs), keep(st.RetainWorkers), keep(st.RetainProcesses), tableTime(st.RanAt), cell(st.WorkerID, 60),
		st.LogsDeleted, st.WorkersDeleted, st.ProcessesDeleted)
}

// running counts a process's running tasks.
func running(p dialect.ProcessStatus) int {
	n := 0
	for _, s := range p.Stages {
		n += s.Running
	}
	return n
}
