package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/stageq/stageq/dialect"
	_ "github.com/stageq/stageq/queue" // registers the dialects
)

// runner carries one run's shared state: the built binaries and what is known
// about the PostgreSQL server's statistics.
type runner struct {
	cfg Config
	out io.Writer

	stageqBin goBuild // the enqueue and worker commands, unless BinDir has them
	riverBin  goBuild // River's CLI, built from bench/river unless RiverBin names one

	pgLog    *pgLog // nil when the server log is not readable
	pgLogWhy string
	pgss     bool // pg_stat_statements is loaded
	pgssWhy  string

	results []Result
}

// Run runs the suite: the ceiling, then every wanted scenario on every
// available dialect. It prints a JSON line per scenario as it ends and the
// table at the end, and returns the results. A dialect that cannot be reached
// is a row of its own, not a failure of the run.
func Run(ctx context.Context, cfg Config, out io.Writer) ([]Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, out: out}
	defer func() {
		r.stageqBin.remove()
		r.riverBin.remove()
	}()

	type dial struct{ name, dsn string }
	var dials []dial
	if cfg.PostgresDSN != "" {
		dials = append(dials, dial{"postgres", cfg.PostgresDSN})
	}
	if !cfg.NoSQLite {
		dials = append(dials, dial{"sqlite", ""})
	}
	if cfg.SQLServerDSN != "" {
		dials = append(dials, dial{"sqlserver", cfg.SQLServerDSN})
	}

	if len(dials) == 0 {
		return nil, ErrNoDialect
	}
	for _, d := range dials {
		if ctx.Err() != nil {
			break
		}
		if !registered(d.name) {
			r.emit(Result{Dialect: d.name, Scenario: "all", Error: "dialect not registered in this build (queue/dialect_<name>.go, build tags stageq_no_<name>)"})
			continue
		}
		t, err := openTarget(ctx, d.name, d.dsn)
		if err != nil {
			r.emit(Result{Dialect: d.name, Scenario: "all", Error: err.Error()})
			continue
		}
		r.runDialect(ctx, t)
		t.close()
	}
	if err := writeTable(out, r.results); err != nil {
		return r.results, err
	}
	return r.results, ctx.Err()
}

// runDialect runs the wanted scenarios on one dialect, the PostgreSQL ceiling first.
func (r *runner) runDialect(ctx context.Context, t *target) {
	cfg := r.cfg
	var ceil float64
	throughput := cfg.wants("drain") || cfg.wants("enqueue") || cfg.wants("river")
	if t.name == "postgres" {
		r.probePostgres(ctx, t)
		if throughput {
			cfg.progress("postgres: ceiling: %s %s", cfg.CeilingScript, strings.Join(cfg.CeilingArgs, " "))
			var why string
			ceil, why = ceiling(ctx, cfg.CeilingScript, cfg.CeilingArgs, cfg.PostgresDSN)
			row := Result{Dialect: "postgres", Scenario: "ceiling", Summary: "n/a", Note: why}
			if ceil > 0 {
				row.TasksPerSec, row.CeilingTasksPerSec = ceil, ceil
				row.Summary = thousands(ceil) + " tasks/s"
				row.note("pg-ceiling.sh %s (pgbench, skip-locked batch claim)", strings.Join(cfg.CeilingArgs, " "))
			}
			r.emit(row)
		}
	}
	withCeiling := func(res Result) Result {
		if t.name == "postgres" && ceil > 0 {
			res.CeilingTasksPerSec = ceil
			if res.TasksPerSec > 0 {
				res.VsCeiling = res.TasksPerSec / ceil
			}
		}
		return res
	}
	unsupported := func(s string) bool {
		// The bench's bulk fill and statistics exist for PostgreSQL and SQLite only.
		if t.name == "sqlserver" && (s == "depth" || s == "idle" || s == "plancache") {
			r.emit(Result{Dialect: t.name, Scenario: s, Summary: "n/a", Note: "not implemented for SQL Server"})
			return true
		}
		return false
	}

	if throughput {
		for _, res := range r.throughput(ctx, t) {
			group, _, _ := strings.Cut(res.Scenario, "/")
			if cfg.wants(group) {
				r.emit(withCeiling(res))
			}
		}
	}
	if cfg.wants("pickup") && ctx.Err() == nil {
		r.emit(withCeiling(r.pickup(ctx, t)))
	}
	if cfg.wants("handoff") && ctx.Err() == nil {
		r.emit(withCeiling(r.handoff(ctx, t)))
	}
	if cfg.wants("depth") && ctx.Err() == nil && !unsupported("depth") {
		for _, res := range r.depth(ctx, t) {
			r.emit(withCeiling(res))
		}
	}
	if cfg.wants("idle") && ctx.Err() == nil && !unsupported("idle") {
		r.emit(withCeiling(r.idle(ctx, t)))
	}
	if cfg.wants("plancache") && ctx.Err() == nil && !unsupported("plancache") {
		r.emit(withCeiling(r.plancache(ctx, t)))
	}
}

// probePostgres finds out which statement statistics the server offers.
func (r *runner) probePostgres(ctx context.Context, t *target) {
	var preload string
	if err := t.admin.DB().QueryRowContext(ctx, "SELECT current_setting('shared_preload_libraries')").Scan(&preload); err != nil {
		r.pgssWhy = fmt.Sprintf("unavailable (%v)", err)
	} else if !strings.Contains(preload, "pg_stat_statements") {
		r.pgssWhy = "unavailable: not in shared_preload_libraries (loading it needs a server restart, which this shared server does not get)"
	} else {
		r.pgss = true
		r.pgssWhy = "loaded"
	}
	l, err := findPGLog(ctx, t.admin.DB(), r.cfg.PGLog)
	if err != nil {
		r.pgLogWhy = err.Error()
		return
	}
	r.pgLog = l
}

// emit prints a result's JSON line and keeps it for the table.
func (r *runner) emit(res Result) {
	if err := res.writeJSON(r.out); err != nil {
		r.cfg.progress("%v", err)
	}
	r.results = append(r.results, res)
}

// registered reports whether this build has the dialect's DSN scheme.
func registered(name string) bool {
	for _, s := range dialect.Schemes() {
		if s == name {
			return true
		}
	}
	return false
}

// ErrNoDialect is returned when a run was given no dialect to measure.
var ErrNoDialect = errors.New("bench: no dialect to run (give a PostgreSQL DSN or leave SQLite on)")
