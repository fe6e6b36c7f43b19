package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/migrations"
	"github.com/stageq/stageq/queue"
)

// NewWorkerCommand builds `worker`. It runs until SIGTERM or SIGINT (the caller's
// context), or until the queue has been idle for --exit-when-idle.
func NewWorkerCommand() *cobra.Command {
	var (
		dsn, targetDSN, id string
		cfg                queue.WorkerConfig
		migrate            bool
		logs               logFlags
		metrics            metricsFlags
	)
	cmd := &cobra.Command{
		Use:   "worker [flags]",
		Short: "Claim and run tasks until stopped",
		Long: `Claims tasks from the queue database and runs them, --concurrency at a time,
respecting each process's stages. Run as many workers as you like, on as many
machines: the database coordinates them. SIGTERM or SIGINT stops claiming, lets
running tasks finish within --shutdown-grace, and releases the rest; a second
SIGTERM or SIGINT releases them at once.`,
		Example: `  worker --concurrency 8
  worker --dsn postgres://stageq@db/etl --migrate
  worker --exit-when-idle 30s   # a batch run: stop once the queue stays empty`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if err := checkWorkerFlags(cmd, cfg); err != nil {
				return err
			}
			for _, d := range []*time.Duration{&cfg.Retention.Logs, &cfg.Retention.Workers, &cfg.Retention.Processes} {
				if *d == 0 {
					*d = -1 // the flag's 0 keeps for ever (the library's 0 is the default)
				}
			}
			if cfg.ShutdownGrace == 0 {
				cfg.ShutdownGrace = -1 // the flag's 0 is no grace (the library's 0 is the default)
			}
			cfg.ID, cfg.Logger, cfg.Version = id, log, Version
			ctx := cmd.Context()
			// The probes answer while the database is waited for.
			mctx, stopMetrics := context.WithCancel(context.WithoutCancel(ctx))
			defer stopMetrics()
			if cfg.Metrics, err = metrics.start(mctx, log); err != nil { // metrics.go
				return err
			}
			c, err := openWithRetry(ctx, dsn, migrate, log)
			if err != nil && ctx.Err() != nil {
				// Stopped (SIGTERM, SIGINT) while the database was waited
				// for: nothing ran, and stopping is what was asked, as
				// when a running worker is stopped.
				log.Info().Err(err).Msg("worker stopped before it connected")
				return nil
			}
			if err != nil {
				return err
			}
			defer c.Close()
			if targetDSN != "" {
				target, err := dialect.Open(ctx, targetDSN)
				if err != nil {
					return fmt.Errorf("target database: %w", err)
				}
				defer target.Close()
				cfg.TargetDB = target.DB()
			}
			w, err := queue.NewWorker(c, cfg)
			if err != nil {
				return UsageError{err}
			}
			metrics.setReady(w.Ready)
			defer hurryOnSecondSignal(ctx, w, log)()
			return w.Run(ctx)
		},
	}
	dsnFlag(cmd, &dsn)
	f := cmd.Flags()
	f.StringVar(&id, "id", "", "worker id in Workers and Logs (default host-pid-random)")
	f.IntVarP(&cfg.Concurrency, "concurrency", "c", 4, "tasks run at once")
	f.DurationVar(&cfg.Lease, "lease", 30*time.Second, "how long a claimed task stays this worker's without a heartbeat")
	f.DurationVar(&cfg.Heartbeat, "heartbeat", 0, "how often leases are extended and expired ones rescued (default lease/3, at most 20s)")
	f.DurationVar(&cfg.PollMax, "poll-max", 2*time.Second, "longest wait between polls of an empty queue")
	f.DurationVar(&cfg.ExitWhenIdle, "exit-when-idle", 0, "exit once no task has run for this long and none of its kinds is left to run (0: run until stopped)")
	f.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", 30*time.Second, "on SIGTERM, how long running tasks may take to finish before they are released (0: none, released at once)")
	f.DurationVar(&cfg.StatementTimeout, "statement-timeout", 30*time.Second, "longest wait for the database to answer one of the queue's own statements (claims, completions; not task bodies) before the worker gives up on it, says so and tries again")
	f.DurationVar(&cfg.RetryBase, "retry-base", time.Second, "backoff after the first failed attempt (doubles per attempt)")
	f.DurationVar(&cfg.RetryMax, "retry-max", 10*time.Minute, "longest backoff between attempts")
	f.IntVar(&cfg.VacuumEvery, "vacuum-every", queue.DefaultVacuumEvery, "PostgreSQL: vacuum the tasks table after this many tasks claimed by this worker (claims read past the dead index entries of claimed tasks until a vacuum); a negative number: never, leave it to autovacuum")
	f.StringVar(&targetDSN, "target-dsn", "", "run SQL bodies on this database instead of the queue's")
	f.BoolVar(&migrate, "migrate", false, "apply missing schema migrations before starting")
	f.StringSliceVar(&cfg.AllowExec, "allow-exec", nil, "programs that tasks of kind exec may run (comma-separated names on PATH or absolute paths); none by default")
	schedulerFlags(f, &cfg) // --no-scheduler (schedule.go)
	retentionFlags(f, &cfg.Retention)
	metrics.add(f) // --metrics-addr (metrics.go)
	logs.add(cmd)
	return cmd
}

// openWithRetry opens the queue database for a worker. A worker is a service: a
// database that is down or does not answer yet is waited for, with backoff and a
// log line per attempt, until the caller's context ends. A DSN or schema that
// is wrong is not going to get better and fails at once.
func openWithRetry(ctx context.Context, dsn string, migrate bool, log zerolog.Logger) (*queue.Client, error) {
	backoff := time.Second
	for attempt := 1; ; attempt++ {
		c, err := openClient(ctx, dsn, migrate, log)
		if err == nil {
			if attempt > 1 {
				log.Info().Int("attempt", attempt).Msg("connected to the queue database")
			}
			return c, nil
		}
		if errors.Is(err, dialect.ErrBadDSN) || errors.Is(err, dialect.ErrUnknownScheme) ||
			errors.Is(err, migrations.ErrSchemaMismatch) || errors.As(err, new(UsageError)) || ctx.Err() != nil {
			return nil, err
		}
		log.Warn().Err(err).Int("attempt", attempt).Dur("retry_in", backoff).
			Msg("queue database unreachable; retrying")
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("gave up connecting after %d attempts: %w", attempt, err)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// checkWorkerFlags refuses values that would otherwise fall back to a default
// without a word (--concurrency 0, --lease 0s).
func checkWorkerFlags(cmd *cobra.Command, cfg queue.WorkerConfig) error {
	changed := cmd.Flags().Changed
	if changed("concurrency") && cfg.Concurrency < 1 {
		return usageErrorf("--concurrency must be >= 1, got %d", cfg.Concurrency)
	}
	if changed("vacuum-every") && cfg.VacuumEvery == 0 {
		return usageErrorf("--vacuum-every must be positive, or negative for never; got 0")
	}
	for _, d := range []struct {
		name   string
		v      time.Duration
		zeroOK bool // 0 means "off" or "default" and is documented as such
	}{
		{"lease", cfg.Lease, false}, {"poll-max", cfg.PollMax, false}, {"retry-base", cfg.RetryBase, false},
		{"retry-max", cfg.RetryMax, false}, {"heartbeat", cfg.Heartbeat, true}, {"exit-when-idle", cfg.ExitWhenIdle, true},
		{"shutdown-grace", cfg.ShutdownGrace, true}, {"statement-timeout", cfg.StatementTimeout, false}, {"retain-logs", cfg.Retention.Logs, true},
		{"retain-workers", cfg.Retention.Workers, true}, {"retain-processes", cfg.Retention.Processes, true},
		{"prune-every", cfg.Retention.Every, false},
	} {
		if !changed(d.name) || d.v > 0 || (d.zeroOK && d.v == 0) {
			continue
		}
		if d.zeroOK {
			return usageErrorf("--%s must not be negative, got %s", d.name, d.v)
		}
		return usageErrorf("--%s must be positive, got %s", d.name, d.v)
	}
	if cfg.Heartbeat > 0 && cfg.Heartbeat >= cfg.Lease {
		return usageErrorf("--heartbeat (%s) must be shorter than --lease (%s)", cfg.Heartbeat, cfg.Lease)
	}
	if cfg.Heartbeat > queue.MaxHeartbeat {
		return usageErrorf("--heartbeat (%s) must be at most %s: a worker silent for a minute is shown dead", cfg.Heartbeat, queue.MaxHeartbeat)
	}
	// A shorter retention deletes the rows of live workers between their
	// heartbeats (queue.MinRetainWorkers says why this floor).
	if cfg.Retention.Workers > 0 && cfg.Retention.Workers < queue.MinRetainWorkers {
		return usageErrorf("--retain-workers must be at least %s (a worker beats at most every %s), or live workers' rows are deleted between their heartbeats; got %s",
			queue.MinRetainWorkers, queue.MaxHeartbeat, cfg.Retention.Workers)
	}
	return nil
}

// retentionFlags adds the pruner's flags (queue/prune.go).
func retentionFlags(f *pflag.FlagSet, r *queue.Retention) {
	f.DurationVar(&r.Logs, "retain-logs", queue.DefaultRetainLogs, "delete Logs rows of attempts started longer ago than this (0: keep for ever)")
	f.DurationVar(&r.Workers, "retain-workers", queue.DefaultRetainWorkers, "delete Workers rows silent longer than this, at least 10m (0: keep for ever)")
	f.DurationVar(&r.Processes, "retain-processes", queue.DefaultRetainProcesses, "delete processes finished longer ago than this, with no task left (0: keep for ever)")
	f.DurationVar(&r.Every, "prune-every", queue.DefaultPruneEvery, "pause between prune passes")
	f.BoolVar(&r.Off, "no-prune", false, "do not prune on this worker (others still do)")
}

// hurryOnSecondSignal ends w's shutdown grace when a second SIGTERM or SIGINT
// comes (the first, which Main turns into the end of the context, starts the
// shutdown): an operator's second Ctrl-C need not wait out --shutdown-grace.
// It returns the function that stops listening. A first signal that came
// before it listened (ctx already ended) counts.
func hurryOnSecondSignal(ctx context.Context, w *queue.Worker, log zerolog.Logger) (stop func()) {
	n := 0
	if ctx.Err() != nil { // asked before listening: that signal is not ch's
		n = 1
	}
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-ch:
				if n++; n == 2 {
					log.Warn().Msg("second signal: releasing running tasks now")
					w.EndGrace()
				}
			}
		}
	}()
	return func() { signal.Stop(ch); close(done) }
}
