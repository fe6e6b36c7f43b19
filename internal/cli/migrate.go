package cli

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/migrations"
)

// newMigrateCommand is `queuectl migrate`: apply and inspect the schema, the
// routines (routines.go), and the two repair steps golang-migrate's own
// command would otherwise be needed for, force and down.
func newMigrateCommand(dsn *string) *cobra.Command {
	cmd := &cobra.Command{Use: "migrate", Short: "Apply, inspect or repair the schema and the routines"}
	cmd.AddCommand(newRoutinesCommands(dsn)...) // routines.go
	cmd.AddCommand(&cobra.Command{
		Use:   "up",
		Short: "Apply every migration the database lacks and install this binary's routines",
		Args:  cobra.NoArgs,
		RunE: withDialect(dsn, func(cmd *cobra.Command, _ []string, d dialect.Dialect) error {
			// A schema newer than this binary: Up says so (ErrNewer) unless the
			// schema floor still admits this binary.
			v, err := migrations.Up(cmd.Context(), d)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: schema is at version %d%s\n", d.Where(), v, routinesNote(d))
			return nil
		}),
	}, &cobra.Command{
		Use:   "version",
		Short: "Print the schema version of the database and the one this binary expects",
		Args:  cobra.NoArgs,
		RunE: withDialect(dsn, func(cmd *cobra.Command, _ []string, d dialect.Dialect) error {
			got, dirty, err := migrations.Version(cmd.Context(), d)
			if err != nil {
				return err
			}
			want, err := migrations.Expected(d.Schema())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "database: %d%s\nbinary expects: %d%s\n", got, map[bool]string{true: " (dirty)"}[dirty], want, routinesNote(d))
			if err := migrations.Check(cmd.Context(), d); err != nil {
				return exitCodeError{code: ExitFailure, err: err}
			}
			return nil
		}),
	}, &cobra.Command{
		Use:   "force VERSION",
		Short: "Record VERSION as the schema version of a dirty database, running nothing (after repairing a failed migration)",
		Long: "A migration that fails half way leaves a version recorded dirty, and every binary refuses the\n" +
			"database; the refusal names the versions to record. Undo or finish by hand what the migration left\n" +
			"(on PostgreSQL and SQLite it rolled back), force the version the tables now match (0: none),\n" +
			"then `queuectl migrate up`. Force changes only the record, never a table, and only of a dirty database.",
		Args:    cobra.ExactArgs(1),
		PreRunE: func(_ *cobra.Command, args []string) error { _, err := forceArg(args[0]); return err },
		RunE: withDialect(dsn, func(cmd *cobra.Command, args []string, d dialect.Dialect) error {
			v, _ := forceArg(args[0])
			if err := migrations.Force(cmd.Context(), d, v); err != nil {
				return asUsage(err)
			}
			if v == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: schema recorded as having no version; nothing ran\n", d.Where())
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: schema version recorded as %d, clean; nothing ran\n", d.Where(), v)
			return nil
		}),
	}, &cobra.Command{
		Use:   "down VERSION",
		Short: "Run the down migrations to VERSION (stop every worker first)",
		Long: "Down migrations undo table changes only: an older release's queue logic comes with that release's\n" +
			"`queuectl migrate up`. Workers of this binary refuse the older schema, so stop them first; a down file\n" +
			"may refuse (one that would leave the database unusable by that version's binaries) and says why.",
		Args:    cobra.ExactArgs(1),
		PreRunE: func(_ *cobra.Command, args []string) error { _, err := versionArg(args[0]); return err },
		RunE: withDialect(dsn, func(cmd *cobra.Command, args []string, d dialect.Dialect) error {
			v, _ := versionArg(args[0])
			got, err := migrations.Down(cmd.Context(), d, v)
			if err != nil {
				return asUsage(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: schema is at version %d\n", d.Where(), got)
			return nil
		}),
	})
	return cmd
}

// forceArg is versionArg for force, which also takes 0 (no version).
func forceArg(s string) (uint, error) {
	if s == "0" {
		return 0, nil
	}
	return versionArg(s)
}

// versionArg reads a schema version argument (a usage error, before any
// connection, when it is not a positive whole number).
func versionArg(s string) (uint, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil || v == 0 {
		return 0, usageErrorf("VERSION %q: give a schema version, a whole number from 1", s)
	}
	return uint(v), nil
}

// asUsage makes a refused target version the caller's error (exit code 2:
// nothing was changed).
func asUsage(err error) error {
	if errors.Is(err, migrations.ErrBadTarget) {
		return UsageError{err}
	}
	return err
}
