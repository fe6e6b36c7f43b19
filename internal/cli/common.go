package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

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
	fmt.Fprintf(stderr, "%s: %v\n", cmd.Name(), err)
	var ue UsageError
	var ec exitCodeError
	switch {
	case errors.As(err, &ec):
		return ec.code
	case errors.As(err, &ue), isCobraUsage(err):
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
		strings.HasPrefix(msg, "invalid argument")
}

// dsnFlag adds --dsn, defaulting to $STAGEQ_DSN, then the embedded SQLite file.
func dsnFlag(cmd *cobra.Command, dsn *string) {
	def := os.Getenv("STAGEQ_DSN")
	if def == "" {
		def = DefaultDSN
	}
	cmd.PersistentFlags().StringVar(dsn, "dsn", def,
		"queue database: sqlite://file.db, postgres://user@host/db, sqlserver://user:pass@host?database=db (env STAGEQ_DSN)")
}

// openClient opens the queue database; migrate applies the schema first.
func openClient(ctx context.Context, dsn string, migrate bool, log zerolog.Logger) (*queue.Client, error) {
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
	switch l.format {
	case "json":
	case "console":
		out = zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.TimeOnly}
	case "auto":
		if f, ok := stderr.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
			out = zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.TimeOnly}
		}
	default:
		return zerolog.Nop(), usageErrorf("--log-format %q: use json, console or auto", l.format)
	}
	return zerolog.New(out).Level(level).With().Timestamp().Logger(), nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
