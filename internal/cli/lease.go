package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/lease"
	"github.com/stageq/stageq/queue"
)

// ExitLeaseHeld is `queuectl lease acquire`'s exit code when another holder has
// the lease, so scripts can tell "someone else runs it" from a failure. (3 to 5
// are the operator commands' codes, status.go.)
const ExitLeaseHeld = 6

// newLeaseCommand builds `queuectl lease`, exclusive leases for scripts.
func newLeaseCommand(dsn *string) *cobra.Command {
	var holder string
	cmd := &cobra.Command{
		Use:   "lease",
		Short: "Exclusive leases for scripts: acquire, extend, release, list",
		Long: `An exclusive lease is a named lock shared by everything that uses this database,
with an expiry on the database's clock and a fencing token that grows with every
new holder. A script acquires it (exit code 6 when another holder has it), extends
it while it works, and releases it with the token it was given:

  token=$(queuectl lease acquire nightly --ttl 5m --holder "$HOSTNAME") || exit 0
  do_the_work --fence "$token"
  queuectl lease release nightly --token "$token" --holder "$HOSTNAME"

The same holder acquiring again while its lease is live gets the same token.`,
	}
	def := os.Getenv("STAGEQ_LEASE_HOLDER")
	if def == "" {
		host, _ := os.Hostname()
		def = fmt.Sprintf("%s-%d", host, os.Getppid()) // the calling shell: stable across its commands
	}
	cmd.PersistentFlags().StringVar(&holder, "holder", def, "holder identity (env STAGEQ_LEASE_HOLDER; default host-parentpid)")

	var ttl time.Duration
	var asJSON bool
	acquire := leaseNameCommand(dsn, "acquire NAME", "Take a lease if it is free or already yours; print its fencing token",
		func(cmd *cobra.Command, name string, d dialect.Dialect) error {
			l, err := lease.New(d, lease.Options{Holder: holder}).TryAcquire(cmd.Context(), name, ttl)
			var held *lease.HeldError
			switch {
			case errors.As(err, &held):
				return exitCodeError{code: ExitLeaseHeld, err: err}
			case err != nil:
				return leaseErr(err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), map[string]any{
					"name": l.Name(), "holder": holder, "token": l.Token(), "expires_at": l.ExpiresAt()})
			}
			fmt.Fprintln(cmd.OutOrStdout(), l.Token())
			return nil
		})
	acquire.Flags().DurationVar(&ttl, "ttl", 30*time.Second, "how long the lease lasts unless extended")
	acquire.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of the bare token")

	var token int64
	var extendTTL time.Duration
	extend := leaseNameCommand(dsn, "extend NAME --token TOKEN", "Push a held lease's expiry to now + --ttl; exit 1 when it was lost",
		func(cmd *cobra.Command, name string, d dialect.Dialect) error {
			info, err := d.LeaseExtend(cmd.Context(), dialect.LeaseExtendParams{Name: name, Holder: holder, Token: token, TTL: extendTTL})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "lease %s (token %d) extended until %s\n", name, token, info.ExpiresAt.UTC().Format(time.RFC3339Nano))
			return nil
		})
	extend.PreRunE = func(*cobra.Command, []string) error { // a bad flag is a usage error, before any connection
		if extendTTL < lease.MinTTL {
			return usageErrorf("--ttl must be at least %s, got %s", lease.MinTTL, extendTTL)
		}
		return nil
	}
	tokenFlag(extend, &token)
	extend.Flags().DurationVar(&extendTTL, "ttl", 30*time.Second, "new lifetime from now")

	var relToken int64
	release := leaseNameCommand(dsn, "release NAME --token TOKEN", "Free a lease you hold; exit 1, changing nothing, when it was lost",
		func(cmd *cobra.Command, name string, d dialect.Dialect) error {
			if err := d.LeaseRelease(cmd.Context(), dialect.LeaseReleaseParams{Name: name, Holder: holder, Token: relToken}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "lease %s released\n", name)
			return nil
		})
	tokenFlag(release, &relToken)

	var all, listJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "Show leases: holder, token, expiry (held ones only unless --all)",
		Args:  cobra.NoArgs,
		RunE: withLeaseDialect(dsn, func(cmd *cobra.Command, _ []string, d dialect.Dialect) error {
			leases, err := lease.Leases(cmd.Context(), d, !all)
			if err != nil {
				return err
			}
			return writeList(cmd.OutOrStdout(), listJSON, leases, "NAME\tHOLDER\tTOKEN\tACQUIRED\tEXPIRES\tSTATE", func(l dialect.LeaseInfo) string {
				state := "held"
				switch {
				case l.Holder == "":
					state = "released"
				case !l.Held():
					state = "expired"
				}
				return fmt.Sprintf("%s\t%s\t%d\t%s\t%s (%s)\t%s", cell(l.Name, 40), cell(dash(l.Holder), 40), l.Token,
					l.AcquiredAt.Local().Format("2006-01-02 15:04:05.000"), tableTime(l.ExpiresAt),
					l.ExpiresAt.Sub(l.Now).Round(time.Millisecond), state)
			})
		}),
	}
	list.Flags().BoolVar(&all, "all", false, "include released and expired leases")
	jsonFlag(list, &listJSON)

	cmd.AddCommand(acquire, extend, release, list)
	return cmd
}

// withLeaseDialect opens the queue database for one command, refusing a schema
// this binary does not know (like every other command), and runs fn with its
// dialect.
func withLeaseDialect(dsn *string, fn func(cmd *cobra.Command, args []string, d dialect.Dialect) error) func(*cobra.Command, []string) error {
	return withClient(dsn, func(cmd *cobra.Command, args []string, c *queue.Client) error {
		return fn(cmd, args, c.Dialect())
	})
}

// leaseNameCommand builds a lease subcommand of one lease NAME (acquire,
// extend, release) that runs on the queue database's dialect.
func leaseNameCommand(dsn *string, use, short string, run func(cmd *cobra.Command, name string, d dialect.Dialect) error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: withLeaseDialect(dsn, func(cmd *cobra.Command, args []string, d dialect.Dialect) error {
			return run(cmd, args[0], d)
		}),
	}
}

// tokenFlag adds the required --token of extend and release: the lease's
// fencing token, which proves the caller still holds it.
func tokenFlag(cmd *cobra.Command, token *int64) {
	cmd.Flags().Int64Var(token, "token", 0, "the fencing token acquire printed")
	_ = cmd.MarkFlagRequired("token")
}

// leaseErr turns invalid names and ttls into usage errors (exit code 2).
func leaseErr(err error) error {
	if errors.Is(err, lease.ErrInvalid) || errors.Is(err, dialect.ErrInvalid) {
		return UsageError{err}
	}
	return err
}
