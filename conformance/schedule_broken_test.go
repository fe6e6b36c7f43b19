package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// TestScheduleBrokenCronOrSubmitDoesNotBlock (issue 10, item 13): a schedule
// whose cron expression no longer parses is paused, and one whose run the
// database refuses has its ticks recorded as failed and moves on; neither holds
// back the schedules due after it.
func TestScheduleBrokenCronOrSubmitDoesNotBlock(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		db.skipDialect(t, "sqlserver", "the refusing trigger below is written for PostgreSQL and SQLite")
		ctx := context.Background()
		o := 0
		mk := func(name, body string) {
			p := stages.Plan{Stages: []stages.Stage{{Order: &o, Tasks: []stages.Task{{Body: body}}}}}
			if _, err := db.Client.ScheduleAdd(ctx, queue.Schedule{Name: name, Every: stages.Duration(time.Second), Plan: p}); err != nil {
				t.Fatal(err)
			}
		}
		mk("a-badcron", "SELECT 1")
		mk("b-refused", "SELECT 'refused'")
		mk("c-healthy", "SELECT 2")
		// Behind the API's back: a cron expression that does not parse, and a
		// database that refuses the second schedule's tasks.
		db.exec(t, schedSQL(db, `UPDATE stageq.schedules SET cron = 'not a cron', interval_ms = NULL WHERE name = 'a-badcron'`))
		switch db.Dialect {
		case "sqlite":
			db.exec(t, `CREATE TRIGGER refuse BEFORE INSERT ON stageq_tasks WHEN NEW.body = 'SELECT ''refused'''
			            BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END`)
		case "postgres":
			// P0001 (raise_exception) is not a validation error: the scheduler
			// tries a few times before giving the tick up.
			db.exec(t, `CREATE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql AS
			            $$ BEGIN IF NEW.body = 'SELECT ''refused''' THEN RAISE EXCEPTION 'refused by a trigger'; END IF; RETURN NEW; END $$`)
			db.exec(t, `CREATE TRIGGER refuse BEFORE INSERT ON stageq.tasks FOR EACH ROW EXECUTE FUNCTION public.refuse()`)
		}
		startWorkers(t, db, 1, fastConfig(), nil)
		waitFor(t, 30*time.Second, "three runs of the healthy schedule and two failed ticks of the refused one", func() bool {
			healthy, failed := 0, 0
			for _, r := range schedRuns(t, db, "c-healthy") {
				if r.Outcome == dialect.RunEnqueued {
					healthy++
				}
			}
			for _, r := range schedRuns(t, db, "b-refused") {
				if r.Outcome == dialect.RunFailed {
					failed++
				}
			}
			return healthy >= 3 && failed >= 2
		})
		list, err := db.Client.Schedules(ctx, "a-badcron")
		if err != nil || len(list) != 1 || !list[0].Paused {
			t.Errorf("the schedule with a broken cron: %+v, %v; want it paused", list, err)
		}
		for _, r := range schedRuns(t, db, "b-refused") {
			if r.Outcome != dialect.RunFailed || r.TaskCount != 0 {
				t.Errorf("refused schedule's tick %s: %+v, want failed with no tasks", r.ScheduledFor, r)
			}
		}
		if n := schedUnfinished(t, db, "b-refused") + schedLogRows(t, db, "b-refused"); n != 0 {
			t.Errorf("the refused schedule left %d tasks or Logs rows", n)
		}
	})
}
