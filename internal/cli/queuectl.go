package cli

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
)

// NewQueuectlCommand builds `queuectl`, the operator's command.
func NewQueuectlCommand() *cobra.Command {
	var dsn string
	root := &cobra.Command{
		Use:   "queuectl",
		Short: "Operate a stageq queue: schema, logs, tasks",
	}
	dsnFlag(root, &dsn)
	root.AddCommand(newMigrateCommand(&dsn), newLogsCommand(&dsn), newTasksCommand(&dsn))
	root.AddCommand(newStatusCommand(&dsn), newRetryCommand(&dsn), newDiscardCommand(&dsn), newCancelCommand(&dsn),
		newPauseCommand(&dsn, true), newPauseCommand(&dsn, false), newLimitCommand(&dsn)) // operate.go, status.go, limit.go
	root.AddCommand(newScheduleCommand(&dsn))                   // schedule.go
	root.AddCommand(newLeaseCommand(&dsn))                      // lease.go
	root.AddCommand(newServeCommand(&dsn), newWhyCommand(&dsn)) // serve.go (package dashboard), why.go
	requireSubcommands(root)
	return root
}

func newLogsCommand(dsn *string) *cobra.Command {
	var (
		f      dialect.LogFilter
		since  time.Duration
		asJSON bool
		out    string
	)
	cmd := &cobra.Command{
		Use:   "logs",
		Short: "Show the Logs trail: every attempt of every task, oldest first (--newest: its recent end)",
		Args:  cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error { // the filter, before any connection
			if since < 0 {
				return usageErrorf("--since must not be negative")
			}
			if f.Limit < 0 || f.TaskID < 0 {
				return usageErrorf("--limit and --task must not be negative (--limit 0 shows every row)")
			}
			if since > 0 {
				f.Since = time.Now().Add(-since)
			}
			if out != "" && !slices.Contains(dialect.Outcomes, dialect.Outcome(out)) {
				return usageErrorf("--outcome %q: use one of %s", out, joinOutcomes(dialect.Outcomes))
			}
			f.Outcome = dialect.Outcome(out)
			return nil
		},
		RunE: withClient(dsn, func(cmd *cobra.Command, _ []string, c *queue.Client) error {
			entries, err := c.Logs(cmd.Context(), f)
			if err != nil {
				return err
			}
			if f.Limit > 0 && len(entries) == f.Limit && !cmd.Flags().Changed("limit") {
				if f.Newest {
					fmt.Fprintf(cmd.ErrOrStderr(), "showing the newest %d rows: narrow with --since, --process, --task or --outcome, or --limit 0 for all\n", f.Limit)
				} else {
					fmt.Fprintf(cmd.ErrOrStderr(), "showing the first %d rows: --newest for the latest, narrow with --since, --process, --task or --outcome, or --limit 0 for all\n", f.Limit)
				}
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), entries)
			}
			return printLogs(cmd, entries)
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Process, "process", "", "only this process")
	fl.Int64Var(&f.TaskID, "task", 0, "only this task id")
	fl.StringVar(&f.WorkerID, "worker", "", "only this worker id")
	fl.StringVar(&out, "outcome", "", "only this outcome: running, succeeded, failed, abandoned, released, or an operator's cancelled, discarded, retried")
	fl.DurationVar(&since, "since", 0, "only attempts started within this long (e.g. 1h)")
	fl.IntVar(&f.Limit, "limit", defaultLogRows, "at most this many rows (0: all)")
	fl.BoolVar(&f.Newest, "newest", false, "the last --limit rows instead of the first (still printed oldest first): the recent end of the trail")
	jsonFlag(cmd, &asJSON)
	return cmd
}

// defaultLogRows caps `logs` unless --limit says otherwise: the trail grows by a
// row per attempt, and a terminal full of them helps nobody.
const defaultLogRows = 200

func printLogs(cmd *cobra.Command, entries []dialect.LogEntry) error {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LOG\tTASK\tPROCESS\tORDER\tWORKER\tATTEMPT\tSTARTED\tENDED\tOUTCOME\tSCHEDULE\tBODY\tERROR")
	for _, e := range entries {
		ended := "-"
		if e.EndedAt != nil {
			ended = tableTime(*e.EndedAt)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.TaskID, cell(e.Process, 40), e.Order,
			cell(e.WorkerID, 60), e.Attempt, tableTime(e.StartedAt), ended, e.Outcome, cell(dash(e.Schedule), 40),
			cell(e.Body, 40), cell(e.Error, 60))
	}
	return tw.Flush()
}

func newTasksCommand(dsn *string) *cobra.Command {
	var (
		f      dialect.TaskFilter
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "List the tasks still in the queue (finished ones are in logs)",
		Args:  cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error { // the filter, before any connection
			if f.State != "" && !slices.Contains(dialect.TaskStates, f.State) {
				return usageErrorf("--state %q: use one of %s", f.State, strings.Join(dialect.TaskStates, ", "))
			}
			if f.Limit < 0 {
				return usageErrorf("--limit must not be negative (0 shows every row)")
			}
			return nil
		},
		RunE: withClient(dsn, func(cmd *cobra.Command, _ []string, c *queue.Client) error {
			tasks, err := c.Dialect().TaskList(cmd.Context(), f)
			if err != nil {
				return err
			}
			return writeList(cmd.OutOrStdout(), asJSON, tasks, "TASK\tPROCESS\tORDER\tSTATE\tATTEMPT\tRUN AT\tWORKER\tBODY\tLAST ERROR", func(t dialect.TaskInfo) string {
				return fmt.Sprintf("%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s", t.ID, cell(t.Process, 40), t.Order, t.State,
					attempts(t), tableTime(t.RunAt), cell(t.WorkerID, 60), cell(t.Body, 40), cell(t.LastError, 60))
			})
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Process, "process", "", "only this process")
	fl.StringVar(&f.State, "state", "", "only this state: blocked, scheduled, available, running, failed")
	fl.StringVar(&f.Kind, "kind", "", "only this kind (sql, exec, or a Go handler's)")
	fl.IntVar(&f.Limit, "limit", 0, "at most this many rows (0: all)")
	jsonFlag(cmd, &asJSON)
	return cmd
}

func joinOutcomes(os []dialect.Outcome) string {
	s := make([]string, len(os))
	for i, o := range os {
		s[i] = string(o)
	}
	return strings.Join(s, ", ")
}

// attempts is a task's attempt of its max_attempts, and the attempts lost to
// infrastructure, which its number counts and max_attempts does not: "2/1"
// alone reads as past its limit.
func attempts(t dialect.TaskInfo) string {
	if t.Abandons == 0 {
		return fmt.Sprintf("%d/%d", t.Attempt, t.MaxAttempts)
	}
	return fmt.Sprintf("%d/%d (%d abandoned, not counted)", t.Attempt, t.MaxAttempts, t.Abandons)
}
