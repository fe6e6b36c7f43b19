package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// TestLongAtomicTaskStallsNoOne (issue 10, item 11): a long atomic SQL task
// runs beside short tasks with short leases. On SQLite its transaction holds
// the database's only write lock for the whole body, so no heartbeat,
// completion or rescue can write meanwhile; still no unrelated attempt may be
// abandoned or cancelled for it, and the atomic task runs once.
func TestLongAtomicTaskStallsNoOne(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		db.skipOnBabelfish(t, "no claim or rescue there (harness_test.go)")
		ctx := context.Background()
		db.exec(t, "CREATE TABLE conf_hold (n INT NOT NULL)")
		atomic := true
		long := db.enqueue(t, "long", 1, stages.Task{
			Body: "INSERT INTO conf_hold (n) VALUES (1); " + db.sleepSQL(3), Atomic: &atomic, MaxAttempts: 1})
		// And one whose body fails after holding the lock as long: its effect
		// is undone, and still nobody else's lease expires for it.
		db.enqueue(t, "longfail", 1, stages.Task{
			Body:   "INSERT INTO conf_hold (n) VALUES (2); " + db.sleepSQL(2) + "; SELECT * FROM conf_no_such_table",
			Atomic: &atomic, MaxAttempts: 1})
		const n = 30
		p := plan("short", "work", []int{1}, sameBody("x"), n)
		p.Defaults.MaxAttempts = 1
		db.submit(t, p)
		cfg := fastConfig()
		cfg.Concurrency = 3
		cfg.Lease = time.Second
		cfg.Heartbeat = 200 * time.Millisecond
		startWorkers(t, db, 2, cfg, func(w *queue.Worker) {
			w.Handle("work", func(ctx context.Context, _ *queue.Task) error {
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-time.After(150 * time.Millisecond):
					return nil
				}
			})
		})
		waitFor(t, 2*time.Minute, "every task to end", func() bool {
			tasks, err := db.D.TaskList(ctx, dialect.TaskFilter{})
			if err != nil || len(tasks) != 1 || tasks[0].State != dialect.StateFailed {
				return false
			}
			for _, e := range db.logs(t, dialect.LogFilter{}) {
				if e.Outcome == dialect.OutcomeRunning {
					return false
				}
			}
			return true
		})
		entries := db.logs(t, dialect.LogFilter{})
		for _, e := range entries {
			if e.Process == "longfail" {
				if e.Outcome != dialect.OutcomeFailed {
					t.Errorf("the failing atomic task's attempt %d ended %s, want failed", e.Attempt, e.Outcome)
				}
				continue
			}
			if e.Outcome != dialect.OutcomeSucceeded && !neverStarted(e) {
				t.Errorf("%s task %d attempt %d: %s %s", e.Process, e.TaskID, e.Attempt, e.Outcome, e.Error)
			}
		}
		if got := countOutcome(entries, dialect.OutcomeSucceeded); got != n+1 {
			t.Errorf("%d attempts succeeded, want %d", got, n+1)
		}
		if got := db.count(t, "SELECT count(*) FROM conf_hold WHERE n = 1"); got != 1 {
			t.Errorf("the atomic body's effect happened %d times, want 1", got)
		}
		if got := db.count(t, "SELECT count(*) FROM conf_hold WHERE n = 2"); got != 0 {
			t.Errorf("the failed atomic body's effect stayed (%d rows)", got)
		}
		if got := len(db.logs(t, dialect.LogFilter{TaskID: long})); got != 1 {
			t.Errorf("the atomic task ran %d times, want 1", got)
		}
	})
}
