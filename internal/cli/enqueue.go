package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// NewEnqueueCommand builds `enqueue`.
func NewEnqueueCommand() *cobra.Command {
	var (
		dsn, process, file, kind, runAt string
		limit                           string // --limit: the task's concurrency limit key
		wait                            bool   // --wait: follow the process to its end
		order, maxAttempts, priority    int
		delay                           time.Duration
		atomic, asJSON                  bool
		plan                            stages.Plan // what the flags and arguments describe
	)
	cmd := &cobra.Command{
		Use:   "enqueue [flags] (BODY | - | --file PLAN)",
		Short: "Add a task, or a whole multi-stage plan, to the queue",
		Long: `Adds one task (its SQL body as the argument, or '-' to read it from stdin), or
a whole process of stages from a plan file (--file plan.yaml or .json) in one
transaction. Prints what it created; --json for scripts.`,
		Example: `  enqueue --order 200 'CALL etl.load_customers()'
  enqueue --process nightly --order 100 --max-attempts 5 'EXEC dbo.LoadCustomers'
  echo 'SELECT 1' | enqueue --order 100 -
  enqueue --file examples/seed001.yaml`,
		Args: cobra.MaximumNArgs(1),
		PreRunE: func(cmd *cobra.Command, args []string) error { // the plan, before any connection
			switch {
			case cmd.Flags().Changed("process") && process == "":
				// Left out, the task joins the default process; given empty it
				// would too, where "  " is refused: a name left blank by mistake.
				return usageErrorf("--process must name a process (leave it out for the default one)")
			case file != "" && len(args) > 0:
				return usageErrorf("give either a body or --file, not both")
			case file != "":
				p, err := planFromFile(cmd, file, process, "order", "kind", "max-attempts", "priority", "delay", "run-at", "atomic", "limit")
				if err != nil {
					return err
				}
				plan = p
			case len(args) == 1:
				body := args[0]
				if body == "-" {
					b, err := io.ReadAll(cmd.InOrStdin())
					if err != nil {
						return fmt.Errorf("read body from stdin: %w", err)
					}
					body = string(b)
				}
				t := stages.Task{Kind: kind, Body: body, MaxAttempts: maxAttempts, Priority: priority,
					Atomic: &atomic, Delay: stages.Duration(delay), Limit: limit}
				if err := checkMaxAttempts(cmd, maxAttempts); err != nil {
					return err
				}
				var err error
				if t.RunAt, err = timeFlag("run-at", runAt); err != nil {
					return err
				}
				plan = singleTaskPlan(process, order, t)
			default:
				return usageErrorf("nothing to enqueue: give a body, '-' for stdin, or --file PLAN")
			}
			if err := queue.ValidatePlan(plan); err != nil {
				return UsageError{err}
			}
			return nil
		},
		RunE: withClient(&dsn, func(cmd *cobra.Command, _ []string, c *queue.Client) error {
			res, err := c.Submit(cmd.Context(), plan)
			if err != nil {
				return err
			}
			if err := printResult(cmd.OutOrStdout(), res, asJSON, wait); err != nil {
				return err
			}
			if !wait {
				return nil
			}
			op, err := dialect.AsOperator(c.Dialect()) // status.go: follow to the end
			if err != nil {
				return err
			}
			return follow(cmd.Context(), op, res.Process, cmd.OutOrStdout(), 500*time.Millisecond, asJSON, waitNote(c.Dialect(), res.Process, time.Minute))
		}),
	}
	dsnFlag(cmd, &dsn)
	f := cmd.Flags()
	f.IntVar(&order, "order", 0, "ExecutionOrder: the stage within its process (whole number >= 0; without it 0, the first stage)")
	f.StringVar(&process, "process", "", `process to add to, created if new (default "default")`)
	f.StringVarP(&file, "file", "f", "", "plan file (.yaml, .yml or .json; '-' for stdin, YAML or JSON) with many stages and tasks")
	f.StringVar(&kind, "kind", queue.KindSQL, "task kind: sql, or the name of a Go handler registered on the workers")
	f.IntVar(&maxAttempts, "max-attempts", stages.DefaultMaxAttempts, "attempts before the task fails for good")
	f.IntVar(&priority, "priority", 0, "higher runs first among the tasks of one submission or of a stage as it opens (not past tasks already waiting)")
	f.DurationVar(&delay, "delay", 0, "run no earlier than this long from now (e.g. 30s, 5m)")
	f.StringVar(&runAt, "run-at", "", "run no earlier than this time (RFC 3339)")
	f.BoolVar(&atomic, "atomic", false, "run the SQL body and the task's completion in one transaction")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	f.StringVar(&limit, "limit", "", "concurrency limit key the task counts against (see queuectl limit)")
	f.BoolVar(&wait, "wait", false, "follow the process to its end (progress bars on a terminal); exit 5 if a task fails for good or the process is cancelled")
	cmd.MarkFlagsMutuallyExclusive("delay", "run-at")
	return cmd
}

func readPlan(name string, stdin io.Reader) (stages.Plan, error) {
	if name == "-" {
		return stages.Parse(stdin, "yaml") // JSON is YAML too
	}
	f, err := os.Open(name)
	if err != nil {
		return stages.Plan{}, fmt.Errorf("plan file: %w", err)
	}
	defer f.Close()
	return stages.ParseFile(name, f)
}

// printResult says what was enqueued; with --wait --json the whole output is a
// stream of one JSON object per line (NDJSON), this one first.
func printResult(w io.Writer, res queue.Result, asJSON, stream bool) error {
	switch {
	case asJSON && stream:
		return writeJSONLine(w, res)
	case asJSON:
		return writeJSON(w, res)
	}
	ids := make([]string, len(res.TaskIDs))
	for i, id := range res.TaskIDs {
		ids[i] = fmt.Sprint(id)
	}
	noun := "task"
	if len(ids) > 1 {
		noun = "tasks"
	}
	list := strings.Join(ids, ", ")
	if len(ids) > 20 {
		list = fmt.Sprintf("%s … %s", strings.Join(ids[:3], ", "), ids[len(ids)-1])
	}
	_, err := fmt.Fprintf(w, "enqueued %d %s (%s) into process %q (id %d)\n", len(ids), noun, list, res.Process, res.ProcessID)
	return err
}

// planFromFile reads the plan of --file (- for stdin), refusing the flags that
// describe a single task (taskFlags: the plan file says those), and applies
// --process when it was given.
func planFromFile(cmd *cobra.Command, file, process string, taskFlags ...string) (stages.Plan, error) {
	for _, f := range taskFlags {
		if cmd.Flags().Changed(f) {
			return stages.Plan{}, usageErrorf("--%s applies to a single task; set it in the plan file instead", f)
		}
	}
	p, err := readPlan(file, cmd.InOrStdin())
	if err != nil {
		return stages.Plan{}, UsageError{err}
	}
	if cmd.Flags().Changed("process") {
		p.Process = process
	}
	return p, nil
}

// singleTaskPlan is the plan of the one task a command line describes: a
// process (empty: the default one) with the task at stage order.
func singleTaskPlan(process string, order int, t stages.Task) stages.Plan {
	return stages.Plan{Process: process, Stages: []stages.Stage{{Order: &order, Tasks: []stages.Task{t}}}}
}

// checkMaxAttempts refuses --max-attempts 0, which the plan would otherwise
// take for "not set" and replace with the default without a word.
func checkMaxAttempts(cmd *cobra.Command, n int) error {
	if cmd.Flags().Changed("max-attempts") && n < 1 {
		return usageErrorf("--max-attempts must be >= 1, got %d", n)
	}
	return nil
}

// timeFlag parses the RFC 3339 time of flag --name; empty is the zero time.
func timeFlag(name, value string) (time.Time, error) {
	if value == "" {
		return time.Time{}, nil
	}
	at, err := time.Parse(time.RFC3339, value)
	if err != nil {
		return time.Time{}, usageErrorf("--%s %q: use RFC 3339, like 2026-01-02T15:04:05Z", name, value)
	}
	return at, nil
}
