package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/stageq/stageq/dashboard"
	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
)

// newWhyCommand builds `queuectl why TASK`: the dashboard's explanation of a
// waiting task, from a shell.
func newWhyCommand(dsn *string) *cobra.Command {
	var (
		id        int64
		asJSON    bool
		deadAfter time.Duration
	)
	cmd := &cobra.Command{
		Use:   "why TASK_ID",
		Short: "Explain why a task is not running: a lower stage, a full limit, max_parallel, pause, run_at, no live worker",
		Long: `Reads what can hold a task back and prints every reason that applies now:
unfinished tasks of a lower stage (and which), a full limit and the tasks holding
its slots, the process's max_parallel, a paused process, a run_at in the future,
no live worker. Exit code 3 when the task is no longer in the queue.`,
		Example: `  queuectl why 42
  queuectl why 42 --json`,
		Args: cobra.ExactArgs(1),
		PreRunE: func(_ *cobra.Command, args []string) error { // bad input, before any connection
			var err error
			if id, err = strconv.ParseInt(args[0], 10, 64); err != nil || id <= 0 {
				return usageErrorf("task id %q: must be a positive whole number", args[0])
			}
			if deadAfter <= 0 {
				return usageErrorf("--dead-after must be positive")
			}
			return nil
		},
		RunE: withClient(dsn, func(cmd *cobra.Command, _ []string, c *queue.Client) error {
			in, err := dialect.AsInspector(c.Dialect())
			if err != nil {
				return err
			}
			w, err := in.TaskWait(cmd.Context(), id, deadAfter)
			if err != nil {
				return opError(err)
			}
			reasons := dashboard.Explain(w)
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"task": w.Task, "reasons": reasons})
			}
			out := cmd.OutOrStdout()
			t := w.Task
			// Names and reasons (which quote a task's error) come from whoever
			// enqueued or ran the task: escaped as in tables, so that they can
			// neither drive the terminal nor forge a line.
			fmt.Fprintf(out, "task %d (process %s, order %d, kind %s) is %s, attempt %s\n", t.ID, cell(t.Process, 0), t.Order, cell(t.Kind, 0), t.State, dashboard.AttemptOf(t))
			for _, r := range reasons {
				fmt.Fprintf(out, "- %s\n", cell(r.Text, 0))
				for _, ref := range r.Tasks {
					worker := ""
					if ref.WorkerID != "" {
						worker = " on " + cell(ref.WorkerID, 0)
					}
					fmt.Fprintf(out, "    task %d (process %s, order %d): %s%s\n", ref.ID, cell(ref.Process, 0), ref.Order, ref.State, worker)
				}
			}
			return nil
		}),
	}
	jsonFlag(cmd, &asJSON)
	cmd.Flags().DurationVar(&deadAfter, "dead-after", time.Minute, "a worker whose last heartbeat is older than this is dead")
	return cmd
}
