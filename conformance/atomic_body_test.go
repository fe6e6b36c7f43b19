package conformance

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/stages"
)

// TestAtomicBodyThatEndsItsTransaction: an atomic task's body that runs a
// COMMIT of its own, then fails or succeeds, or a ROLLBACK of its own, ended the transaction that was to
// record its completion with it. The attempt fails for good with a message
// that says so, and is not run again: what the body did before its COMMIT
// (committed on PostgreSQL and SQLite; nothing on SQL Server, whose body runs
// in a nested transaction) happens at most once. Before, PostgreSQL and
// SQLite recorded an ordinary failure and retried, committing the insert on
// every attempt; SQL Server refused the body, and retried too.
func TestAtomicBodyThatEndsItsTransaction(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		db.skipOnBabelfish(t, "no claim there (harness_test.go)")
		ctx := context.Background()
		effects := map[string]string{"postgres": "public.stageq_effects", "sqlserver": "dbo.stageq_effects"}[db.Dialect]
		if effects == "" {
			effects = "stageq_effects"
		}
		db.exec(t, "CREATE TABLE "+effects+" (process varchar(50))")
		yes := true
		cases := []struct{ process, after string }{
			{"commits-then-fails", "COMMIT; SELECT * FROM stageq_no_such_table"},
			{"commits-then-succeeds", "COMMIT"},
			{"rolls-back", "ROLLBACK"},
		}
		for _, c := range cases {
			body := "INSERT INTO " + effects + " VALUES ('" + c.process + "'); " + c.after
			if _, err := db.Client.Enqueue(ctx, c.process, 1, stages.Task{Body: body, Atomic: &yes, MaxAttempts: 3}); err != nil {
				t.Fatal(err)
			}
		}
		cfg := fastConfig()
		cfg.RetryBase, cfg.RetryMax = time.Millisecond, time.Millisecond // a retry would come at once
		startWorkers(t, db, 1, cfg, nil)
		for _, c := range cases {
			process := c.process
			waitFor(t, 20*time.Second, process+" to fail for good", func() bool {
				tk := db.tasks(t, dialect.TaskFilter{Process: process})
				return len(tk) == 1 && tk[0].State == dialect.StateFailed
			})
			logs := db.logs(t, dialect.LogFilter{Process: process})
			if len(logs) != 1 || logs[0].Outcome != dialect.OutcomeFailed || logs[0].RetryAt != nil ||
				!strings.Contains(logs[0].Error, "ended the task's transaction") {
				t.Errorf("%s: Logs %+v; want one failed attempt, no retry, saying the body ended the task's transaction", process, logs)
			}
			if n := db.count(t, "SELECT count(*) FROM "+effects+" WHERE process = '"+process+"'"); n > 1 {
				t.Errorf("%s: the body's insert happened %d times; want at most once", process, n)
			}
		}
	})
}
