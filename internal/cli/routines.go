package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/routines"
)

// newRoutinesCommands are `migrate routines` and `migrate prune-routines`: the
// routine versions a database holds, and dropping those no live worker calls
// once a rolling upgrade is over (package routines says how one goes).
func newRoutinesCommands(dsn *string) []*cobra.Command {
	var (
		live   time.Duration
		asJSON bool
	)
	list := routinesCommand(dsn, &live, "routines", "List the routine versions installed, and how many live workers call each",
		func(cmd *cobra.Command, d dialect.Dialect, r dialect.Routines) error {
			vs, err := routines.List(cmd.Context(), d.DB(), r, live)
			if err != nil {
				return err
			}
			return writeList(cmd.OutOrStdout(), asJSON, vs, "VERSION\tSCHEMA\tINSTALLED\tLIVE WORKERS\tTHIS BINARY", func(v dialect.RoutineVersion) string {
				mine := ""
				if v.Version == r.Version {
					mine = "yes"
				}
				return fmt.Sprintf("%d\t%s\t%s\t%d\t%s", v.Version, v.Namespace, v.InstalledAt.UTC().Format(time.RFC3339), v.Workers, mine)
			})
		})
	jsonFlag(list, &asJSON)
	prune := routinesCommand(dsn, &live, "prune-routines", "Drop the routine versions no live worker calls (the newest always stays)",
		func(cmd *cobra.Command, d dialect.Dialect, r dialect.Routines) error {
			dropped, err := routines.Prune(cmd.Context(), d.DB(), r, live)
			if err != nil {
				return err
			}
			if len(dropped) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "nothing to drop: every older version is called by a live worker, or none is installed")
				return nil
			}
			for _, v := range dropped {
				fmt.Fprintf(cmd.OutOrStdout(), "dropped routines version %d (schema %s)\n", v, dialect.RoutineNamespace(v))
			}
			return nil
		})
	return []*cobra.Command{list, prune}
}

// routinesCommand builds a migrate subcommand without arguments that runs fn
// on the database's dialect and its routines (a dialect that keeps its logic
// in Go gets a note instead), with the --live flag both of them read.
func routinesCommand(dsn *string, live *time.Duration, use, short string, fn func(*cobra.Command, dialect.Dialect, dialect.Routines) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: withDialect(dsn, func(cmd *cobra.Command, _ []string, d dialect.Dialect) error {
			r := d.Schema().Routines
			if r == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "%s keeps its queue logic in the binary: no routines in the database\n", d.Name())
				return nil
			}
			return fn(cmd, d, *r)
		}),
	}
	cmd.Flags().DurationVar(live, "live", 10*time.Minute,
		"a worker that has not stopped counts as live while its last heartbeat is this recent (keep it above a third of the workers' --lease)")
	return cmd
}

// routinesNote names the routine version a binary calls, for dialects that
// keep routines.
func routinesNote(d dialect.Dialect) string {
	if r := d.Schema().Routines; r != nil {
		return fmt.Sprintf(", routines version %d (schema %s)", r.Version, r.Namespace())
	}
	return ""
}
