package conformance

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
)

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
