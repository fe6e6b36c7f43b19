package cli

import (
	"fmt"
	"os"
	"os/user"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/internal/operate"
)

// taskOrProcess reads the target of retry / discard / cancel: a task id as the
// argument, or --process NAME.
func taskOrProcess(args []string, process string) (int64, error) {
	switch {
	case len(args) == 1 && process != "":
		return 0, usageErrorf("give either a task id or --process, not both")
	case len(args) == 1:
		id, err := strconv.ParseInt(args[0], 10, 64)
		if err != nil || id <= 0 {
			return 0, usageErrorf("task id %q: must be a positive whole number", args[0])
		}
		return id, nil
	case process != "":
		return 0, nil
	}
	return 0, usageErrorf("give a task id or --process NAME")
}

// newTaskOpCommand builds retry, discard and cancel, which share their shape:
// act on one task or on a process, then say what was done.
func newTaskOpCommand(dsn *string, use, short, long string, act operate.Action) *cobra.Command {
	var (
		id      int64 // the TASK_ID argument; 0 with --process
		process string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   use + " (TASK_ID | --process NAME)",
		Short: short,
		Long:  long,
		Args:  cobra.MaximumNArgs(1),
		PreRunE: func(_ *cobra.Command, args []string) error { // bad input, before any connection
			var err error
			id, err = taskOrProcess(args, process)
			return err
		},
		RunE: withOperator(dsn, func(cmd *cobra.Command, _ []string, op dialect.Operator) error {
			cmd.SetContext(dialect.WithActor(cmd.Context(), operatorName())) // who, in the Logs row
			var (
				msg string
				err error
			)
			if id != 0 {
				msg, err = act.OnTask(cmd.Context(), op, id)
			} else {
				msg, err = act.OnProcess(cmd.Context(), op, process)
			}
			if err != nil {
				return opError(err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"ok": true, "message": msg})
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), msg)
			return err
		}),
	}
	cmd.Flags().StringVar(&process, "process", "", "act on every matching task of this process")
	jsonFlag(cmd, &asJSON)
	return cmd
}

func newRetryCommand(dsn *string) *cobra.Command {
	return newTaskOpCommand(dsn, "retry", "Run a failed task (or every failed task of a process) again with fresh attempts",
		"Only tasks that failed for good can be retried; a running or waiting task is refused (exit 4).",
		operate.Retry)
}

func newDiscardCommand(dsn *string) *cobra.Command {
	return newTaskOpCommand(dsn, "discard", "Give up on a failed task (or every failed task of a process): later stages may run",
		"A discarded task counts as finished for the stage barrier. Only failed tasks can be discarded (exit 4 otherwise).",
		operate.Discard)
}

func newCancelCommand(dsn *string) *cobra.Command {
	return newTaskOpCommand(dsn, "cancel", "Remove a task that is not running (or every such task of a process)",
		"Running tasks are never interrupted: cancelling one is refused (exit 4); for a process, they finish their attempt.",
		operate.Cancel)
}

func newPauseCommand(dsn *string, pause bool) *cobra.Command {
	use, short := "pause PROCESS", "Stop claiming a process's tasks (running ones finish)"
	if !pause {
		use, short = "resume PROCESS", "Let workers claim a paused process's tasks again"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: withOperator(dsn, func(cmd *cobra.Command, args []string, op dialect.Operator) error {
			msg, err := operate.SetPaused(cmd.Context(), op, args[0], pause)
			if err != nil {
				return opError(err)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), msg)
			return err
		}),
	}
}

// operatorName is who runs queuectl, as Logs records operator actions:
// user@host (STAGEQ_ACTOR overrides it, for example in a CI job).
func operatorName() string {
	if v := os.Getenv("STAGEQ_ACTOR"); v != "" {
		return v
	}
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}
