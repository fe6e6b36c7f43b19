package conformance

// The worker's housekeeping services (queue/service.go): the retention pass
// (ServicePrune) and the vacuum of the tasks table (ServiceVacuum).

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
)

// TestRetentionPrunes (issue 10, item 16): workers, with no leader, delete old
// Logs rows, silent Workers rows and long-finished processes in batches, keep
// everything recent or still in use, and `queuectl status` shows the last pass.
func TestRetentionPrunes(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		pr := db.D.(dialect.Pruner)
		// daysAgo is the database's now minus some days, in the dialect's words.
		daysAgo := map[string]string{
			"postgres":  "now() - interval '%d days'",
			"sqlite":    "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-%d days')",
			"sqlserver": "DATEADD(day, -%d, SYSUTCDATETIME())",
		}[db.Dialect]
		old, recent := fmt.Sprintf(daysAgo, 100), fmt.Sprintf(daysAgo, 1)
		// 2,500 Logs rows of attempts 100 days old, one old attempt still
		// "running" (its worker may yet finish it), and one recent row. T-SQL has
		// no series function, and a recursive CTE stops at 100 levels unless the
		// statement says OPTION (MAXRECURSION 0): numbered pairs of catalog rows.
		series := map[string]string{
			"postgres": "SELECT g FROM generate_series(1, 2500) g",
			"sqlite":   "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < 2500) SELECT g FROM s",
			"sqlserver": "SELECT TOP (2500) ROW_NUMBER() OVER (ORDER BY (SELECT NULL)) AS g " +
				"FROM sys.all_columns AS a CROSS JOIN sys.all_columns AS b",
		}[db.Dialect]
		insertLog := `INSERT INTO stageq.logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt, lease_token, started_at, outcome) `
		db.exec(t, schedSQL(db, insertLog+`SELECT g, 1, 'old', 1, 'sql', 'SELECT 1', 'w-old', 1, g, `+old+`, 'succeeded' FROM (`+series+`) x`))
		db.exec(t, schedSQL(db, insertLog+`VALUES (9001, 1, 'old', 1, 'sql', 'SELECT 1', 'w-old', 1, 1, `+old+`, 'running')`))
		db.exec(t, schedSQL(db, insertLog+`VALUES (9002, 1, 'new', 1, 'sql', 'SELECT 1', 'w-new', 1, 1, `+recent+`, 'succeeded')`))
		// A worker silent for 100 days, and a finished process as old.
		db.exec(t, schedSQL(db, `INSERT INTO stageq.workers (id, hostname, pid, concurrency, heartbeat_at) VALUES ('w-old', 'h', 1, 1, `+old+`)`))
		code, _, stderr := runCLI(t, "enqueue", "", "--dsn", db.DSN, "--process", "done-long-ago", "--delay", "1h", "SELECT 1")
		if code != 0 {
			t.Fatal(stderr)
		}
		if code, _, stderr = runCLI(t, "queuectl", "", "--dsn", db.DSN, "cancel", "--process", "done-long-ago"); code != 0 {
			t.Fatal(stderr)
		}
		db.exec(t, schedSQL(db, `UPDATE stageq.processes SET finished_at = `+old+` WHERE name IN ('done-long-ago', 'default')`))
		if code, _, stderr = runCLI(t, "enqueue", "", "--dsn", db.DSN, "--process", "still-open", "--delay", "1h", "SELECT 1"); code != 0 {
			t.Fatal(stderr)
		}

		// One statement deletes one batch, no more.
		if n, err := pr.PruneLogs(ctx, dialect.PruneParams{Age: 30 * 24 * time.Hour, Batch: 400}); err != nil || n != 400 {
			t.Fatalf("one batch of 400 deleted %d rows (%v)", n, err)
		}

		// Two workers prune the rest side by side.
		cfg := fastConfig()
		cfg.Retention = queue.Retention{Logs: 30 * 24 * time.Hour, Workers: 24 * time.Hour, Processes: 30 * 24 * time.Hour,
			Every: 200 * time.Millisecond, Batch: 300}
		startWorkers(t, db, 2, cfg, nil)
		logsLeft := func() int {
			return db.count(t, schedSQL(db, `SELECT count(*) FROM stageq.logs WHERE process_name = 'old'`))
		}
		waitFor(t, 60*time.Second, "the old rows pruned", func() bool {
			return logsLeft() == 1 &&
				db.count(t, schedSQL(db, `SELECT count(*) FROM stageq.workers WHERE id = 'w-old'`)) == 0 &&
				db.count(t, schedSQL(db, `SELECT count(*) FROM stageq.processes WHERE name = 'done-long-ago'`)) == 0
		})
		kept := map[string]string{
			"the old running attempt": `SELECT count(*) FROM stageq.logs WHERE task_id = 9001`,
			"the recent Logs row":     `SELECT count(*) FROM stageq.logs WHERE task_id = 9002`,
			"the default process":     `SELECT count(*) FROM stageq.processes WHERE name = 'default'`,
			"the process with a task": `SELECT count(*) FROM stageq.processes WHERE name = 'still-open'`,
		}
		if db.Dialect != "sqlserver" {
			// SQL Server's operator commands write no Logs row yet (migration 3
			// widened its CHECK constraints only), so there is no audit row to keep.
			kept["the operator's audit row"] = `SELECT count(*) FROM stageq.logs WHERE process_name = 'done-long-ago' AND outcome = 'cancelled'`
		}
		for what, q := range kept {
			if n := db.count(t, schedSQL(db, q)); n != 1 {
				t.Errorf("%s: %d rows, want it kept", what, n)
			}
		}

		code, out, stderr := runCLI(t, "queuectl", "", "--dsn", db.DSN, "status")
		if code != 0 || !strings.Contains(out, "retention: logs 30d, workers 1d, finished processes 30d; last pass") {
			t.Errorf("status: exit %d, %s%s", code, out, stderr)
		}
		_, out, _ = runCLI(t, "queuectl", "", "--dsn", db.DSN, "status", "--json")
		var rep struct {
			Retention map[string]any `json:"retention"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Retention["retain_logs_seconds"] != float64(30*24*3600) {
			t.Errorf("status --json retention: %v (%v)", rep.Retention, err)
		}
	})
}

// TestWorkerVacuumsTheTasksTable: where claims read past the dead index
// entries of claimed tasks until a vacuum removes them
// (dialect.TaskVacuumer), a worker vacuums the tasks table every VacuumEvery
// tasks it claims, and the database counts those vacuums; with VacuumEvery
// negative it leaves that to autovacuum.
func TestWorkerVacuumsTheTasksTable(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		if _, ok := db.D.(dialect.TaskVacuumer); !ok {
			t.Skipf("%s leaves nothing behind for a vacuum to remove", db.Dialect)
		}
		noop := func(w *queue.Worker) {
			if err := w.Handle("noop", func(context.Context, *queue.Task) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		drain := func(every int, process string) int64 {
			t.Helper()
			var passes atomic.Int64
			cfg := fastConfig()
			cfg.Concurrency, cfg.VacuumEvery = 8, every
			cfg.OnPass = func(s string) {
				if s == queue.ServiceVacuum {
					passes.Add(1)
				}
			}
			db.submit(t, plan(process, "noop", []int{1}, sameBody("x"), 300))
			pool := startWorkers(t, db, 1, cfg, noop)
			waitFor(t, time.Minute, "300 tasks", func() bool {
				return len(db.logs(t, dialect.LogFilter{Process: process, Outcome: dialect.OutcomeSucceeded})) == 300
			})
			pool.stop()
			return passes.Load()
		}
		vacuums := func() int64 {
			t.Helper()
			if db.Dialect != "postgres" {
				return -1
			}
			return int64(db.count(t, `SELECT vacuum_count FROM pg_stat_user_tables WHERE schemaname = 'stageq' AND relname = 'tasks'`))
		}
		before := vacuums()
		if n := drain(50, "vac-every-50"); n < 1 || n > 6 {
			t.Fatalf("300 tasks claimed with a vacuum every 50: %d vacuum passes; want 1 to 6 (requests coalesce while one runs)", n)
		}
		if db.Dialect == "postgres" {
			waitFor(t, 10*time.Second, "the server to count the worker's vacuums", func() bool { return vacuums() > before })
		}
		counted := vacuums()
		if n := drain(-1, "vac-never"); n != 0 {
			t.Fatalf("with VacuumEvery -1: %d vacuum passes; want none", n)
		}
		if n := vacuums(); n != counted {
			t.Fatalf("with VacuumEvery -1 the server counted %d vacuums more; want none", n-counted)
		}
	})
}
