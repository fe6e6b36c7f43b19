package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stageq/stageq/dialect"
)

func newLimitCommand(dsn *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limit",
		Short: "Cluster-wide concurrency limits: set, get, list, delete",
		Long: `A limit caps how many tasks run at once across every worker. Keys:
  NAME          tasks enqueued with --limit NAME (or limit: NAME in a plan)
  kind:KIND     every task of a kind
  process:NAME  every task of a process (its max_parallel)
A change takes effect at the next claim; lowering a limit lets running tasks
finish and starts no new ones above it. 0 stops a named or kind limit's tasks.`,
	}
	var asJSON bool
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")
	var n int // set's MAX
	set := &cobra.Command{
		Use:   "set KEY MAX",
		Short: "Create or change a limit",
		Args:  cobra.ExactArgs(2),
		PreRunE: func(_ *cobra.Command, args []string) error { // bad input, before any connection
			var err error
			if n, err = strconv.Atoi(args[1]); err != nil {
				return usageErrorf("limit %q: MAX %q must be a whole number >= 0", args[0], args[1])
			}
			if err := dialect.ValidateLimit(args[0], n); err != nil {
				return UsageError{err}
			}
			return nil
		},
		RunE: withOperator(dsn, func(cmd *cobra.Command, args []string, op dialect.Operator) error {
			if err := op.LimitSet(cmd.Context(), args[0], n); err != nil {
				return opError(err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), dialect.LimitInfo{Key: args[0], Max: n})
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "limit %q set to %d\n", args[0], n)
			return err
		}),
	}
	// "limit set KEY -1" reaches the flag parser as a flag; say what is wrong.
	set.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if strings.Contains(err.Error(), "unknown shorthand flag") && strings.Contains(err.Error(), "in -") {
			return usageErrorf("limit: MAX must be a whole number >= 0 (%v)", err)
		}
		return UsageError{fmt.Errorf("%w\nrun '%s --help' for usage", err, c.CommandPath())}
	})
	cmd.AddCommand(set, &cobra.Command{
		Use:   "get KEY",
		Short: "Show a limit and its slots in use",
		Args:  cobra.ExactArgs(1),
		RunE: withOperator(dsn, func(cmd *cobra.Command, args []string, op dialect.Operator) error {
			l, err := op.LimitGet(cmd.Context(), args[0])
			if err != nil {
				return opError(err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), l)
			}
			return printLimits(cmd.OutOrStdout(), []dialect.LimitInfo{l})
		}),
	}, &cobra.Command{
		Use:   "list",
		Short: "Show every limit and its slots in use",
		Args:  cobra.NoArgs,
		RunE: withOperator(dsn, func(cmd *cobra.Command, _ []string, op dialect.Operator) error {
			ls, err := op.LimitList(cmd.Context())
			if err != nil {
				return opError(err)
			}
			if asJSON {
				if ls == nil {
					ls = []dialect.LimitInfo{}
				}
				return writeJSON(cmd.OutOrStdout(), ls)
			}
			return printLimits(cmd.OutOrStdout(), ls)
		}),
	}, &cobra.Command{
		Use:   "delete KEY",
		Short: "Remove a limit: its tasks become unlimited",
		Args:  cobra.ExactArgs(1),
		RunE: withOperator(dsn, func(cmd *cobra.Command, args []string, op dialect.Operator) error {
			if err := op.LimitDelete(cmd.Context(), args[0]); err != nil {
				return opError(err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"key": args[0], "deleted": true})
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "limit %q deleted\n", args[0])
			return err
		}),
	})
	return cmd
}

func printLimits(w io.Writer, ls []dialect.LimitInfo) error {
	return writeList(w, false, ls, "LIMIT\tMAX\tRUNNING", func(l dialect.LimitInfo) string {
		return fmt.Sprintf("%s\t%d\t%d", cell(l.Key, 60), l.Max, l.Running)
	})
}
