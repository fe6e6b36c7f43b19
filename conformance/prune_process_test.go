package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// TestPruneSkipsAProcessBeingFilled: the prune deletes an ended process only
// when none of its tasks is left, under the process's row lock, and a
// submission to a process takes that lock before it adds tasks. With a
// submission to an ended process held open, the prune must leave the process
// alone, and once the submission commits its task must still have its
// process. Since schema version 14 no foreign key from tasks to processes
// checks this on PostgreSQL (migrations/postgres/000014_stage_index_waiting.up.sql):
// the process's row lock does, and, for a submission that commits between the
// prune's snapshot and its lock, the prune's re-check of the process's state,
// which the submission set active again.
func TestPruneSkipsAProcessBeingFilled(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		if db.Dialect == "sqlite" {
			t.Skip("SQLite has one writer at a time: the prune waits for the submission to commit, no race to force")
		}
		db.skipOnBabelfish(t, "no claim there (harness_test.go)")
		ctx := context.Background()
		res := db.submit(t, plan("refill", "work", []int{100}, sameBody("x"), 1))
		db.succeed(t, nil, claimAll(t, db, 1, 1)[0])
		if sa, ok := db.D.(dialect.StageAdvancer); ok {
			advance(t, sa, res.ProcessID, "end the process")
		}
		if p, err := db.D.ProcessGet(ctx, "refill"); err != nil || p.State != "succeeded" {
			t.Fatalf("process after its one task: %+v, %v; want succeeded", p, err)
		}
		time.Sleep(10 * time.Millisecond) // ended longer ago than the prune's age

		pruner, ok := db.D.(dialect.Pruner)
		if !ok {
			t.Fatalf("%s does not prune", db.Dialect)
		}
		prune := func() int {
			t.Helper()
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			n, err := pruner.PruneProcesses(pctx, dialect.PruneParams{Age: time.Millisecond, Batch: 10})
			if err != nil {
				t.Fatalf("prune: %v", err)
			}
			return n
		}
		tx := db.holdSubmission(t, plan("refill", "work", []int{200}, sameBody("y"), 1))
		defer tx.Rollback()
		if n := prune(); n != 0 {
			t.Fatalf("the prune deleted %d processes while a submission to the ended one was open; want none", n)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if n := prune(); n != 0 {
			t.Fatalf("the prune deleted %d processes after the submission committed; want none (it is active again)", n)
		}
		p, err := db.D.ProcessGet(ctx, "refill")
		if err != nil || p.ID != res.ProcessID {
			t.Fatalf("process after the submission: %+v, %v; want the same process (id %d)", p, err, res.ProcessID)
		}
		if tasks := db.tasks(t, dialect.TaskFilter{Process: "refill"}); len(tasks) != 1 || tasks[0].Order != 200 {
			t.Fatalf("tasks of the process: %+v; want the submitted one, order 200", tasks)
		}
	})
}
