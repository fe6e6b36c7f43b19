package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// newScheduleCommand builds `queuectl schedule`.
func newScheduleCommand(dsn *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Manage recurring schedules: add, list, pause, resume, delete, run-now, runs",
		Long: `A schedule enqueues a task, or a whole multi-stage plan, at every tick of a cron
expression or an interval. Every worker runs the scheduler (worker --no-scheduler
turns it off); the database's clock decides which ticks are due, and each tick is
enqueued exactly once however many workers run.

Missed ticks (everything was down, or the schedule paused, for longer than its
--grace) are skipped by default; --missed once enqueues one catch-up run instead.
--singleton skips a tick while a task of the previous run is still in the queue.`,
	}
	cmd.AddCommand(newScheduleAddCommand(dsn), newScheduleListCommand(dsn), newScheduleRunsCommand(dsn),
		scheduleNameCommand(dsn, "pause", "Stop a schedule's ticks (ticks passing meanwhile are missed ticks)",
			func(cmd *cobra.Command, c *queue.Client, name string) error {
				return c.SchedulePause(cmd.Context(), name)
			}),
		scheduleNameCommand(dsn, "resume", "Restart a paused schedule",
			func(cmd *cobra.Command, c *queue.Client, name string) error {
				return c.ScheduleResume(cmd.Context(), name)
			}),
		scheduleNameCommand(dsn, "delete", "Remove a schedule (runs already enqueued stay)",
			func(cmd *cobra.Command, c *queue.Client, name string) error {
				return c.ScheduleDelete(cmd.Context(), name)
			}),
		scheduleNameCommand(dsn, "run-now", "Enqueue one run of a schedule now, leaving its next tick alone",
			func(cmd *cobra.Command, c *queue.Client, name string) error {
				host, _ := os.Hostname()
				res, err := c.ScheduleRunNow(cmd.Context(), name, fmt.Sprintf("queuectl@%s", host))
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "enqueued %d task(s) to process %s: %v\n", len(res.TaskIDs), cell(res.Process, 0), res.TaskIDs)
				return nil
			}),
	)
	return cmd
}

func newScheduleAddCommand(dsn *string) *cobra.Command {
	var (
		s                         queue.Schedule
		from, file, process, kind string
		order, maxAttempts        int
		every, grace              time.Duration
		start                     string
	)
	cmd := &cobra.Command{
		Use:   "add NAME (--cron EXPR | --every DURATION) (BODY | --file PLAN) | add --from SCHEDULE_FILE",
		Short: "Create a schedule",
		Long: `Creates a schedule. --cron takes five fields (minute hour day month weekday), six
with seconds first, or @hourly/@daily/@weekly/@monthly/@yearly; its zone is --tz, a
CRON_TZ=Zone prefix, or UTC. --every takes an interval (first tick one interval
from now, or --start). The template is one SQL task (BODY) or a plan file (--file);
--from reads the whole schedule (name, cron or every, plan, missed, grace,
singleton) from a YAML or JSON file.`,
		Example: `  queuectl schedule add nightly --cron '0 2 * * *' --tz Europe/Paris --file nightly.yaml
  queuectl schedule add refresh --every 5m --singleton 'CALL mart.refresh()'
  queuectl schedule add report --cron '*/30 * * * * *' --missed once --order 100 'EXEC dbo.Report'
  queuectl schedule add --from schedules/nightly.yaml`,
		Args: cobra.MaximumNArgs(2),
		PreRunE: func(cmd *cobra.Command, args []string) error { // the schedule, before any connection
			if from != "" {
				// The connection's flags may go with it; the schedule's may not.
				conn := boolToInt(cmd.Flags().Changed("dsn")) + boolToInt(cmd.Flags().Changed("connect-timeout"))
				if len(args) > 0 || cmd.Flags().NFlag() > 1+conn {
					return usageErrorf("--from reads the whole schedule from its file; give no other flags or arguments")
				}
				var err error
				if s, err = readSchedule(from); err != nil {
					return UsageError{err}
				}
			} else {
				if len(args) == 0 {
					return usageErrorf("give the schedule's NAME")
				}
				s.Name = args[0]
				s.Every, s.Grace = stages.Duration(every), stages.Duration(grace)
				if cmd.Flags().Changed("every") && every <= 0 {
					return usageErrorf("--every must be positive, got %s", every)
				}
				var err error
				if s.Start, err = timeFlag("start", start); err != nil {
					return err
				}
				switch {
				case file != "" && len(args) == 2:
					return usageErrorf("give either a BODY or --file, not both")
				case file != "":
					p, err := planFromFile(cmd, file, process, "order", "kind", "max-attempts")
					if err != nil {
						return err
					}
					s.Plan = p
				case len(args) == 2:
					if err := checkMaxAttempts(cmd, maxAttempts); err != nil {
						return err
					}
					s.Plan = singleTaskPlan(process, order, stages.Task{Kind: kind, Body: args[1], MaxAttempts: maxAttempts})
				default:
					return usageErrorf("nothing to schedule: give a BODY or --file PLAN")
				}
			}
			return nil
		},
		RunE: withClient(dsn, func(cmd *cobra.Command, _ []string, c *queue.Client) error {
			info, err := c.ScheduleAdd(cmd.Context(), s)
			if err != nil {
				return scheduleErr(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schedule %s added (%s); next run %s\n", info.Name, when(info),
				info.NextRun.UTC().Format(time.RFC3339Nano))
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "read the whole schedule from a YAML or JSON file")
	f.StringVar(&s.Cron, "cron", "", "cron expression (seconds optional; CRON_TZ=Zone prefix allowed)")
	f.StringVar(&s.TimeZone, "tz", "", "time zone of --cron, like Europe/Paris (default UTC)")
	f.DurationVar(&every, "every", 0, "interval between ticks, like 30s or 1h, at least 1s (instead of --cron)")
	f.StringVar(&start, "start", "", "first tick of an --every schedule (RFC 3339; default one interval from now)")
	f.StringVar(&file, "file", "", "plan file (.yaml, .yml or .json) each tick enqueues")
	f.StringVar(&process, "process", "", "process of the runs (default: the plan's, else the schedule's name)")
	f.IntVar(&order, "order", 0, "ExecutionOrder of the single task")
	f.StringVar(&kind, "kind", "", "task kind of the single task (default sql)")
	f.IntVar(&maxAttempts, "max-attempts", 0, "attempts of the single task (default 3)")
	f.StringVar(&s.Missed, "missed", dialect.MissedSkip, "ticks missed beyond --grace: skip (drop them) or once (one catch-up run)")
	f.DurationVar(&grace, "grace", queue.DefaultScheduleGrace, "how late a tick may be enqueued and still count as on time")
	f.BoolVar(&s.Singleton, "singleton", false, "skip a tick while a task of the previous run is unfinished")
	f.BoolVar(&s.Paused, "paused", false, "create the schedule paused")
	return cmd
}

func boolToInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// readSchedule reads a schedule file (YAML or JSON by extension) as plan
// files are read (stages.Decode): unknown fields, a second schedule, fractions
// where a whole number belongs and the rest refused.
func readSchedule(name string) (queue.Schedule, error) {
	var s queue.Schedule
	format, err := stages.FileFormat(name)
	if err != nil {
		return s, fmt.Errorf("%w: %v", queue.ErrInvalidSchedule, err)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return s, fmt.Errorf("read schedule file: %w", err)
	}
	if err := stages.Decode(b, format, "schedule", &s); err != nil {
		return s, fmt.Errorf("%w: %s: %v", queue.ErrInvalidSchedule, name, err)
	}
	return s, nil
}

// scheduleErr turns the caller's mistakes into usage errors (exit code 2) and a
// missing schedule into exit code 3, like every other command.
func scheduleErr(err error) error {
	switch {
	case errors.Is(err, dialect.ErrNotFound):
		return exitCodeError{code: ExitNotFound, err: err}
	case errors.Is(err, queue.ErrInvalidSchedule), errors.Is(err, stages.ErrInvalidPlan),
		errors.Is(err, dialect.ErrExists), errors.Is(err, dialect.ErrInvalid):
		return UsageError{err}
	}
	return err
}

// scheduleNameCommand builds a subcommand that takes one schedule name.
func scheduleNameCommand(dsn *string, use, short string, run func(*cobra.Command, *queue.Client, string) error) *cobra.Command {
	return &cobra.Command{
		Use:   use + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: withClient(dsn, func(cmd *cobra.Command, args []string, c *queue.Client) error {
			if err := run(cmd, c, args[0]); err != nil {
				return scheduleErr(err)
			}
			if use != "run-now" {
				fmt.Fprintf(cmd.OutOrStdout(), "schedule %s: %s done\n", args[0], use)
			}
			return nil
		}),
	}
}

func newScheduleListCommand(dsn *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [NAME]",
		Short: "List schedules with their next and last runs",
		Args:  cobra.MaximumNArgs(1),
		RunE: withClient(dsn, func(cmd *cobra.Command, args []string, c *queue.Client) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			list, err := c.Schedules(cmd.Context(), name)
			if err != nil {
				return err
			}
			if name != "" && len(list) == 0 {
				return exitCodeError{code: ExitNotFound, err: fmt.Errorf("schedule %q: %w", name, dialect.ErrNotFound)}
			}
			return writeList(cmd.OutOrStdout(), asJSON, list, "NAME\tWHEN\tNEXT RUN\tLAST RUN\tLAST OUTCOME\tMISSED\tSINGLETON\tPAUSED", func(s dialect.ScheduleInfo) string {
				last := "-"
				if s.LastRun != nil {
					last = s.LastRun.Local().Format("2006-01-02 15:04:05.000")
				}
				return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%t\t%t", cell(s.Name, 40), cell(when(s), 40),
					s.NextRun.Local().Format("2006-01-02 15:04:05.000"), last, dash(s.LastOutcome), s.Missed, s.Singleton, s.Paused)
			})
		}),
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}

func newScheduleRunsCommand(dsn *string) *cobra.Command {
	var (
		asJSON bool
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "runs NAME",
		Short: "Show a schedule's recent ticks: enqueued, caught up, missed or skipped, and by which worker",
		Args:  cobra.ExactArgs(1),
		PreRunE: func(*cobra.Command, []string) error { // before any connection
			if limit < 0 {
				return usageErrorf("--limit must not be negative (0 shows every tick kept)")
			}
			return nil
		},
		RunE: withClient(dsn, func(cmd *cobra.Command, args []string, c *queue.Client) error {
			runs, err := c.ScheduleRuns(cmd.Context(), args[0], limit)
			if err != nil {
				return err
			}
			if len(runs) == 0 {
				// No runs of a schedule, or no such schedule: only the second
				// is an error, as for schedule list NAME.
				known, err := c.Schedules(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if len(known) == 0 {
					return exitCodeError{code: ExitNotFound, err: fmt.Errorf("schedule %q: %w", args[0], dialect.ErrNotFound)}
				}
			}
			return writeList(cmd.OutOrStdout(), asJSON, runs, "SCHEDULED FOR\tOUTCOME\tTASKS\tPROCESS\tWORKER\tFIRED AT", func(r dialect.ScheduleRun) string {
				return fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s", r.ScheduledFor.Local().Format("2006-01-02 15:04:05.000"),
					r.Outcome, r.TaskCount, runProcess(r), cell(r.WorkerID, 60), tableTime(r.FiredAt))
			})
		}),
	}
	jsonFlag(cmd, &asJSON)
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many of the latest ticks (0: all kept)")
	return cmd
}

func when(s dialect.ScheduleInfo) string {
	if s.Cron != "" {
		return "cron " + strings.TrimPrefix(s.Cron, "CRON_TZ=UTC ")
	}
	return "every " + s.Interval.String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// schedulerFlags adds the worker's scheduler flags: --no-scheduler, and a hidden
// --clock-skew that shifts the worker's own clock, for proving (and showing) that
// the database's clock alone decides which ticks are due.
func schedulerFlags(f *pflag.FlagSet, cfg *queue.WorkerConfig) {
	f.BoolVar(&cfg.NoScheduler, "no-scheduler", false, "do not run recurring schedules on this worker (others still do)")
	f.Var(&skewFlag{cfg: cfg}, "clock-skew", "testing: pretend this worker's clock is off by this much (e.g. -5m)")
	_ = f.MarkHidden("clock-skew")
}

// skewFlag sets WorkerConfig.Clock to time.Now shifted by the flag's duration.
type skewFlag struct {
	cfg  *queue.WorkerConfig
	skew time.Duration
}

func (s *skewFlag) String() string { return s.skew.String() }
func (s *skewFlag) Type() string   { return "duration" }
func (s *skewFlag) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("use a duration like -5m or 90s")
	}
	s.skew = d
	s.cfg.Clock = func() time.Time { return time.Now().Add(d) }
	return nil
}

// printSchedulerStatus writes the schedules' next runs and the held exclusive
// leases (holder, token, expiry), for `queuectl status`.
func printSchedulerStatus(ctx context.Context, d dialect.Scheduler, w io.Writer) error {
	scheds, err := d.ScheduleList(ctx, dialect.ScheduleFilter{})
	if err != nil {
		return err
	}
	leases, err := d.LeaseList(ctx, dialect.LeaseFilter{HeldOnly: true})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(scheds) > 0 {
		fmt.Fprintln(tw, "SCHEDULE\tWHEN\tNEXT RUN\tLAST RUN\tLAST OUTCOME")
		for _, s := range scheds {
			next := s.NextRun.Local().Format("2006-01-02 15:04:05")
			if s.Paused {
				next = "paused"
			}
			last := "-"
			if s.LastRun != nil {
				last = s.LastRun.Local().Format("2006-01-02 15:04:05")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cell(s.Name, 40), cell(when(s), 40), next, last, dash(s.LastOutcome))
		}
	}
	if len(leases) > 0 {
		fmt.Fprintln(tw, "LEASE\tHOLDER\tTOKEN\tEXPIRES IN\t")
		for _, l := range leases {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t\n", cell(l.Name, 40), cell(l.Holder, 40), l.Token, l.ExpiresAt.Sub(l.Now).Round(time.Millisecond))
		}
	}
	return tw.Flush()
}

// runProcess names a run's process: by name while retention keeps it, else by
// id; "-" for a run that enqueued nothing.
func runProcess(r dialect.ScheduleRun) string {
	switch {
	case r.Process != "":
		return cell(r.Process, 60)
	case r.ProcessID != 0:
		return fmt.Sprintf("#%d (pruned)", r.ProcessID)
	}
	return "-"
}
