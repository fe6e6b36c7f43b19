package bench

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// planRun is one workload of the plan-cache scenario.
type planRun struct {
	processes, stagesPer, tasksPer int
	limits                         int   // distinct limit keys, each set with LimitSet
	workers                        []int // concurrency of each worker
}

// plancache counts the distinct statements the queue sends PostgreSQL in a
// small workload (run A) and then in a larger one with more tasks, processes,
// limits and workers (run B) on the same database. A queue with a fixed handful
// of parameterised statements shows the same count after both.
//
// Statements come from pg_stat_statements when it is loaded, else from the
// server log with log_statement = 'all' set on this database alone. The log has
// the raw text, so it is stricter than pg_stat_statements (which folds
// constants): a statement with an inlined value counts once per value.
func (r *runner) plancache(ctx context.Context, t *target) Result {
	res := Result{Dialect: t.name, Scenario: "plancache"}
	if t.name != "postgres" {
		res.Summary = "n/a"
		res.note("only PostgreSQL exposes its statements here")
		return res
	}
	if r.pgLog == nil && !r.pgss {
		res.Summary = "unavailable"
		res.note("no pg_stat_statements (%s) and no server log (%s)", r.pgssWhy, r.pgLogWhy)
		return res
	}
	dsn, drop, err := t.createDB(ctx, "plancache")
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer drop()
	db := dbName(dsn)
	// Migrate first, before statements are logged: migrations are not the queue's
	// steady state.
	c, err := queue.Open(ctx, dsn, queue.Config{Migrate: true, Logger: zerolog.Nop()})
	if err != nil {
		res.Error = err.Error()
		return res
	}
	c.Close()
	if r.pgLog != nil {
		if _, err := t.admin.DB().ExecContext(ctx, "ALTER DATABASE "+db+" SET log_statement = 'all'"); err != nil {
			res.Error = fmt.Sprintf("log_statement: %v", err)
			return res
		}
	}
	var sampler *sql.DB
	if r.pgss {
		if sampler, err = pgssSampler(ctx, dsn); err != nil {
			res.note("pg_stat_statements: %v", err)
		} else {
			defer sampler.Close()
		}
	}

	runs := []planRun{
		{processes: 2, stagesPer: 2, tasksPer: 3, limits: 1, workers: []int{2}},
		{processes: 12, stagesPer: 3, tasksPer: 25, limits: 4, workers: []int{3, 8}},
	}
	var off0 int64
	if r.pgLog != nil {
		off0, _ = r.pgLog.offset()
	}
	var counts, pgssCounts []int
	var seen map[string]int
	var newInB []string
	for i, pr := range runs {
		r.cfg.progress("%s: plancache run %c: %d processes x %d stages x %d tasks, %d limits, workers %v",
			t.name, 'A'+i, pr.processes, pr.stagesPer, pr.tasksPer, pr.limits, pr.workers)
		if err := r.planWorkload(ctx, dsn, fmt.Sprintf("r%d", i), pr); err != nil {
			res.Error = fmt.Sprintf("run %c: %v", 'A'+i, err)
			return res
		}
		if r.pgLog != nil {
			// The server writes its log asynchronously to our reads; a moment's
			// pause lets the last statements land.
			time.Sleep(200 * time.Millisecond)
			stmts, err := r.pgLog.statements(db, off0)
			if err != nil {
				res.Error = err.Error()
				return res
			}
			all := distinct(stmts)
			if seen != nil {
				for s := range all {
					if _, ok := seen[s]; !ok {
						newInB = append(newInB, s)
					}
				}
			}
			seen = all
			counts = append(counts, len(all))
		}
		if sampler != nil {
			var n int
			if err := sampler.QueryRowContext(ctx, `SELECT count(DISTINCT queryid) FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query NOT ILIKE '%pg_stat_statements%'`).Scan(&n); err == nil {
				pgssCounts = append(pgssCounts, n)
			}
		}
	}
	tasks := func(pr planRun) int { return pr.processes * pr.stagesPer * pr.tasksPer }
	res.N = tasks(runs[0]) + tasks(runs[1])
	var parts []string
	if len(counts) == 2 {
		res.set("log_distinct_after_a", counts[0])
		res.set("log_distinct_after_b", counts[1])
		slices.Sort(newInB)
		for i, s := range newInB {
			if len(s) > 160 {
				newInB[i] = s[:160] + "…"
			}
		}
		res.set("new_in_b", newInB)
		res.set("statements", seen)
		verdict := "constant"
		if counts[1] != counts[0] {
			verdict = fmt.Sprintf("GREW by %d", counts[1]-counts[0])
		}
		parts = append(parts, fmt.Sprintf("server log: %d distinct after A (%d tasks), %d after A+B (%d tasks): %s",
			counts[0], tasks(runs[0]), counts[1], tasks(runs[0])+tasks(runs[1]), verdict))
	}
	if len(pgssCounts) == 2 {
		res.set("pgss_distinct_after_a", pgssCounts[0])
		res.set("pgss_distinct_after_b", pgssCounts[1])
		parts = append(parts, fmt.Sprintf("pg_stat_statements: %d then %d", pgssCounts[0], pgssCounts[1]))
	} else {
		res.note("pg_stat_statements: %s", r.pgssWhy)
	}
	res.Summary = strings.Join(parts, "; ")
	res.note("A: %d procs, %d limit, 1 worker; B: %d procs, %d limits, 2 workers; SQL bodies all 'SELECT 1'; retention passes off (4 fixed statements more per pass)",
		runs[0].processes, runs[0].limits, runs[1].processes, runs[1].limits)
	return res
}

// planWorkload submits the run's plans, sets its limits, and runs its workers
// until every process has succeeded.
func (r *runner) planWorkload(ctx context.Context, dsn, tag string, pr planRun) error {
	c, err := queue.Open(ctx, dsn, queue.Config{Logger: zerolog.Nop()})
	if err != nil {
		return err
	}
	defer c.Close()
	op, err := dialect.AsOperator(c.Dialect())
	if err != nil {
		return err
	}
	for l := range pr.limits {
		if err := op.LimitSet(ctx, fmt.Sprintf("%s-limit-%d", tag, l), 2+l); err != nil {
			return fmt.Errorf("limit: %w", err)
		}
	}
	var names []string
	for p := range pr.processes {
		name := fmt.Sprintf("%s-proc-%d", tag, p)
		names = append(names, name)
		plan := stages.Plan{Process: name}
		for s := range pr.stagesPer {
			order := (s + 1) * 10
			st := stages.Stage{Order: &order}
			if pr.limits > 0 {
				st.Limit = fmt.Sprintf("%s-limit-%d", tag, (p+s)%pr.limits)
			}
			for k := range pr.tasksPer {
				if k%2 == 0 {
					st.Tasks = append(st.Tasks, stages.Task{Kind: kindNoop, Body: "noop"})
				} else {
					st.Tasks = append(st.Tasks, stages.Task{Body: "SELECT 1"})
				}
			}
			plan.Stages = append(plan.Stages, st)
		}
		if _, err := c.Submit(ctx, plan); err != nil {
			return fmt.Errorf("submit %s: %w", name, err)
		}
	}
	var stops []func() error
	for _, conc := range pr.workers {
		// Retention passes off: their four fixed statements come once per
		// --prune-every (the first after 1-11 s), so whether a run this short
		// sees them is a matter of timing, not of the workload's size.
		stop, err := startWorker(ctx, dsn, queue.WorkerConfig{Concurrency: conc, Retention: queue.Retention{Off: true}},
			map[string]queue.Handler{kindNoop: noopHandler})
		if err != nil {
			return err
		}
		stops = append(stops, stop)
	}
	deadline := time.Now().Add(r.cfg.Timeout)
	ok := true
	for _, n := range names {
		if !waitSucceeded(ctx, c, n, deadline) {
			ok = false
			break
		}
	}
	for _, stop := range stops {
		stop()
	}
	if !ok {
		return fmt.Errorf("processes not done within %s", r.cfg.Timeout)
	}
	return nil
}
