// Command stageq-bench runs stageq's benchmark suite (package bench) against
// PostgreSQL and SQLite, and SQL Server when STAGEQ_SQLSERVER_DSN is set. It
// prints one JSON line per scenario and then a table; progress goes to stderr.
//
//	go run ./cmd/stageq-bench            # the full run (200,000 tasks)
//	go run ./cmd/stageq-bench -quick     # the CI smoke test
//	go run ./cmd/stageq-bench -scenarios river,drain -runs 3   # stageq against River, interleaved
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/stageq/stageq/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "stageq-bench:", err)
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// run parses the flags and runs the suite. -quick is applied before the other
// flags are read, so an explicit flag overrides the quick defaults.
func run(ctx context.Context, args []string) error {
	cfg := bench.NewConfig()
	if v := os.Getenv("STAGEQ_POSTGRES_DSN"); v != "" {
		cfg.PostgresDSN = v
	}
	cfg.SQLServerDSN = os.Getenv("STAGEQ_SQLSERVER_DSN")
	if v := os.Getenv("STAGEQ_PG_CEILING"); v != "" {
		cfg.CeilingScript = v
	}
	for _, a := range args {
		if a == "-quick" || a == "--quick" || a == "-quick=true" || a == "--quick=true" {
			cfg.Quick()
		}
	}

	fs := flag.NewFlagSet("stageq-bench", flag.ContinueOnError)
	fs.Bool("quick", false, "smoke-test sizes: N=5000, 100 pickups, 100,000-task depth, short idle window, 10s bound per scenario")
	fs.StringVar(&cfg.PostgresDSN, "pg", cfg.PostgresDSN, "PostgreSQL server DSN (env STAGEQ_POSTGRES_DSN); the run creates and drops its own databases; '' skips PostgreSQL")
	fs.StringVar(&cfg.SQLServerDSN, "sqlserver", cfg.SQLServerDSN, "SQL Server DSN (env STAGEQ_SQLSERVER_DSN); '' skips SQL Server")
	fs.BoolVar(&cfg.NoSQLite, "no-sqlite", cfg.NoSQLite, "skip SQLite")
	scenarios := fs.String("scenarios", "", "comma-separated subset: drain,enqueue,river,pickup,handoff,depth,idle,plancache (default all; river is River's own burn-down, the peer the drains are compared with)")
	fs.IntVar(&cfg.N, "n", cfg.N, "tasks enqueued and drained by the drain and enqueue scenarios")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "the drain worker's concurrency")
	fs.IntVar(&cfg.Runs, "runs", cfg.Runs, "repeats of river, drain and enqueue, interleaved (the table shows medians)")
	fs.IntVar(&cfg.Runs, "repeat", cfg.Runs, "same as -runs")
	fs.IntVar(&cfg.SpreadProcesses, "spread-processes", cfg.SpreadProcesses, "processes drain/spread splits the N tasks over")
	fs.IntVar(&cfg.PickupSamples, "pickup-samples", cfg.PickupSamples, "single-task pickups measured")
	fs.DurationVar(&cfg.PickupGap, "pickup-gap", cfg.PickupGap, "idle pause before each pickup")
	fs.IntVar(&cfg.HandoffPlans, "handoff-plans", cfg.HandoffPlans, "three-stage plans of the handoff scenario (two handoffs each)")
	fs.IntVar(&cfg.HandoffWidth, "handoff-width", cfg.HandoffWidth, "tasks per stage in the handoff scenario")
	fs.IntVar(&cfg.DepthSmall, "depth-small", cfg.DepthSmall, "queue size of the depth scenario's baseline")
	fs.IntVar(&cfg.DepthLarge, "depth-large", cfg.DepthLarge, "queue size (pending, and blocked) of the depth scenario's large cases")
	fs.IntVar(&cfg.DepthOps, "depth-ops", cfg.DepthOps, "claim+finish pairs measured per depth case")
	fs.DurationVar(&cfg.IdleSettle, "idle-settle", cfg.IdleSettle, "time the idle worker runs before measuring")
	fs.DurationVar(&cfg.IdleWindow, "idle-window", cfg.IdleWindow, "length of the idle measurement")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "bound on each scenario; one that hits it reports what finished")
	fs.StringVar(&cfg.CeilingScript, "ceiling", cfg.CeilingScript, "path of pg-ceiling.sh (env STAGEQ_PG_CEILING); '' skips the ceiling")
	ceilArgs := fs.String("ceiling-args", strings.Join(cfg.CeilingArgs, " "), "pg-ceiling.sh arguments: batch clients seconds")
	fs.StringVar(&cfg.BinDir, "bin", cfg.BinDir, "directory with prebuilt enqueue and worker binaries (default: go build them)")
	fs.StringVar(&cfg.SourceDir, "src", cfg.SourceDir, "module root to build the binaries from (River's CLI from its bench/river)")
	fs.StringVar(&cfg.RiverBin, "river", cfg.RiverBin, "prebuilt River CLI v0.47.0 (default: go build it from bench/river)")
	fs.StringVar(&cfg.PGLog, "pg-log", cfg.PGLog, "PostgreSQL server log for statement counts (default: found from the server)")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the whole run (the in-process drain worker included) to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *scenarios != "" {
		cfg.Scenarios = strings.Split(*scenarios, ",")
	}
	cfg.CeilingArgs = strings.Fields(*ceilArgs)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	cfg.Progress = func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, a...))
	}
	_, err := bench.Run(ctx, cfg, os.Stdout)
	cfg.Progress("done")
	return err
}
