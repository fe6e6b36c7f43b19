package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
)

// DefaultDSN is the embedded SQLite database in the current directory: a new
// user needs no server.
const DefaultDSN = "sqlite://stageq.db"

// Version is stamped by the build (-ldflags "-X github.com/stageq/stageq/internal/cli.Version=…").
var Version = "dev"

// Exit codes shared by the commands, for scripts.
const (
	ExitOK      = 0
	ExitFailure = 1 // the operation failed (database error, task failed, …)
	ExitUsage   = 2 // bad flags, arguments or input; nothing was changed
)

// UsageError marks an error as the caller's (exit code 2).
type UsageError struct{ Err error }

func (u UsageError) Error() string { return u.Err.Error() }
func (u UsageError) Unwrap() error { return u.Err }

func usageErrorf(format string, args ...any) error {
	return UsageError{fmt.Errorf(format, args...)}
}

// Main runs cmd as a program: the process's arguments and standard streams,
// a context that SIGTERM and SIGINT cancel (a worker then stops claiming and
// finishes what it runs), and Execute's code as the exit status.
func Main(cmd *cobra.Command) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := Execute(ctx, cmd, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Execute runs a command with the process's arguments and returns the exit code.
func Execute(ctx context.Context, cmd *cobra.Command, args []string, stdout, stderr io.Writer) int {
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SilenceUsage = true
	cmd.SilenceErrors = true
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return UsageError{fmt.Errorf("%w\nrun '%s --help' for usage", err, c.CommandPath())}
	})
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	// The library's errors may already name the command (a Worker's start with
	// "worker: "): one prefix is enough.
	msg := err.Error()
	if !strings.HasPrefix(msg, cmd.Name()+": ") {
		msg = cmd.Name() + ": " + msg
	}
	fmt.Fprintln(stderr, msg)
	var ue UsageError
	var ec exitCodeError
	switch {
	case errors.As(err, &ec):
		return ec.code
	case errors.As(err, &ue), isCobraUsage(err),
		errors.Is(err, dialect.ErrBadDSN), errors.Is(err, dialect.ErrUnknownScheme):
		return ExitUsage
	}
	return ExitFailure
}

// exitCodeError carries a specific exit code (for example queuectl's wait).
type exitCodeError struct {
	code int
	err  error
}

func (e exitCodeError) Error() string { return e.err.Error() }
func (e exitCodeError) Unwrap() error { return e.err }

func isCobraUsage(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "unknown flag") ||
		strings.Contains(msg, "accepts ") || strings.Contains(msg, "requires at least") ||
		strings.HasPrefix(msg, "invalid argument") || strings.HasPrefix(msg, "required flag") ||
		strings.HasPrefix(msg, "if any flags in the group")
}

// dsnForms shows a DSN of each dialect the build links, in --help's order.
var dsnForms = []struct{ scheme, form string }{
	{"sqlite", "sqlite://file.db"},
	{"postgres", "postgres://user@host/db"},
	{"sqlserver", "sqlserver://user:pass@host?database=db"},
}

// dsnDefault is what --dsn means when not given: $STAGEQ_DSN, else the
// embedded SQLite file where the build links SQLite, else nothing (the command
// then asks for --dsn). It also returns --dsn's help, which names only the
// linked dialects: a build made with stageq_no_<dialect> tags offered DSNs it
// could not open, and defaulted to a SQLite file it could not open either.
func dsnDefault(env string, schemes []string) (def, usage string) {
	var forms []string
	for _, f := range dsnForms {
		if slices.Contains(schemes, f.scheme) {
			forms = append(forms, f.form)
		}
	}
	def = env
	if def == "" && slices.Contains(schemes, "sqlite") {
		def = DefaultDSN
	}
	return def, "queue database: " + strings.Join(forms, ", ") + " (env STAGEQ_DSN)"
}

// dsnFlag adds --dsn (dsnDefault) and --connect-timeout, which (when given)
// overrides the DSN's own bound on a connection attempt; without either,
// dialect.DefaultConnectTimeout applies.
func dsnFlag(cmd *cobra.Command, dsn *string) {
	def, usage := dsnDefault(os.Getenv("STAGEQ_DSN"), dialect.Schemes())
	pf := cmd.PersistentFlags()
	pf.StringVar(dsn, "dsn", def, usage)
	// --help prints the default: never the password that STAGEQ_DSN carries.
	pf.Lookup("dsn").DefValue = dialect.Redact(def)
	var timeout time.Duration
	pf.DurationVar(&timeout, "connect-timeout", dialect.DefaultConnectTimeout,
		"give up a connection attempt after this long (overrides connect_timeout / \"connection timeout\" in the DSN)")
	cmd.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		if !c.Flags().Changed("connect-timeout") {
			return nil
		}
		if timeout <= 0 {
			return usageErrorf("--connect-timeout must be positive, got %s", timeout)
		}
		*dsn = dialect.WithConnectTimeout(*dsn, timeout)
		return nil
	}
}

// needDSN refuses an empty DSN before a command opens it: a build without
// SQLite has no default (dsnDefault). Commands that open no database
// (completion, help) work without one.
func needDSN(dsn string) error {
	if dsn == "" {
		return usageErrorf("no database given: set --dsn or STAGEQ_DSN (%s)", strings.Join(dialect.Schemes(), ", "))
	}
	return nil
}

// openClient opens the queue database; migrate applies the schema first.
func openClient(ctx context.Context, dsn string, migrate bool, log zerolog.Logger) (*queue.Client, error) {
	if err := needDSN(dsn); err != nil {
		return nil, err
	}
	c, err := queue.Open(ctx, dsn, queue.Config{Migrate: migrate, Logger: log})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// logFlags adds --log-level and --log-format.
type logFlags struct {
	level, format string
}

func (l *logFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&l.level, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().StringVar(&l.format, "log-format", "auto", "json, console, or auto (console on a terminal, JSON otherwise)")
}

// logger builds the zerolog logger: JSON by default, readable console output
// when stderr is a terminal.
func (l *logFlags) logger(stderr io.Writer) (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(l.level)
	if err != nil || l.level == "" {
		return zerolog.Nop(), usageErrorf("--log-level %q: use debug, info, warn or error", l.level)
	}
	var out io.Writer = stderr
	f, isFile := stderr.(*os.File)
	tty := isFile && isatty.IsTerminal(f.Fd())
	switch l.format {
	case "json":
	case "console":
		// Colours only on a terminal: a redirected log keeps plain text.
		out = zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.TimeOnly, NoColor: !tty}
	case "auto":
		if tty {
			out = zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.TimeOnly}
		}
	default:
		return zerolog.Nop(), usageErrorf("--log-format %q: use json, console or auto", l.format)
	}
	return zerolog.New(out).Level(level).With().Timestamp().Logger(), nil
}

// requireSubcommands makes every command group under root (migrate, limit,
// schedule, lease) refuse an unknown or missing subcommand with exit code 2;
// cobra would print the group's help and exit 0, which a script takes for success.
func requireSubcommands(root *cobra.Command) {
	for _, c := range root.Commands() {
		requireSubcommands(c)
		if !c.HasSubCommands() || c.Runnable() {
			continue
		}
		c.RunE = func(cmd *cobra.Command, args []string) error {
			names := make([]string, 0, len(cmd.Commands()))
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() {
					names = append(names, sub.Name())
				}
			}
			if len(args) > 0 {
				return usageErrorf("unknown command %q for %q; use one of: %s", args[0], cmd.CommandPath(), strings.Join(names, ", "))
			}
			return usageErrorf("%q needs a subcommand: %s", cmd.CommandPath(), strings.Join(names, ", "))
		}
	}
}

// withClient opens the queue at *dsn for one command (refusing a schema this
// binary does not know) and runs fn with its client; the connection closes when
// fn returns. A command whose input can be wrong checks it in PreRunE, so that
// a usage error comes before any connection.
func withClient(dsn *string, fn func(cmd *cobra.Command, args []string, c *queue.Client) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, err := openClient(cmd.Context(), *dsn, false, zerolog.Nop())
		if err != nil {
			return err
		}
		defer c.Close()
		return fn(cmd, args, c)
	}
}

// jsonFlag adds --json, "print JSON", to a command that prints a table or a
// message otherwise.
func jsonFlag(cmd *cobra.Command, asJSON *bool) {
	cmd.Flags().BoolVar(asJSON, "json", false, "print JSON")
}

// withOperator opens the queue at *dsn for one command and runs fn with its
// Operator; the connection closes when fn returns.
func withOperator(dsn *string, fn func(cmd *cobra.Command, args []string, op dialect.Operator) error) func(*cobra.Command, []string) error {
	return withClient(dsn, func(cmd *cobra.Command, args []string, c *queue.Client) error {
		op, err := dialect.AsOperator(c.Dialect())
		if err != nil {
			return err
		}
		return fn(cmd, args, op)
	})
}

// withDialect opens the database at *dsn for one command and runs fn with its
// dialect; the connection closes when fn returns.
func withDialect(dsn *string, fn func(cmd *cobra.Command, args []string, d dialect.Dialect) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := needDSN(*dsn); err != nil {
			return err
		}
		d, err := dialect.Open(cmd.Context(), *dsn)
		if err != nil {
			return err
		}
		defer d.Close()
		return fn(cmd, args, d)
	}
}
