package conformance

// A broken schedule (a plan that no longer enqueues, a cron expression that no
// longer parses, a run the database refuses) is set aside, and the schedules
// due after it keep firing.

import (
	"context"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/stages"
)

// TestScheduleBrokenCronOrSubmitDoesNotBlock (issue 10, item 13): a schedule
// whose cron expression no longer parses is paused, and one whose run the
// database refuses has its ticks recorded as failed and moves on; neither holds
// back the schedules due after it.
func TestScheduleBrokenCronOrSubmitDoesNotBlock(t *testing.T) {
	forEachDialectBut(t, "sqlserver", "the refusing trigger below is written for PostgreSQL and SQLite", func(t *testing.T, db *testDB) {
		ctx := context.Background()
		db.addSchedule(t, everySecond("a-badcron", stages.Task{Body: "SELECT 1"}))
		db.addSchedule(t, everySecond("b-refused", stages.Task{Body: "SELECT 'refused'"}))
		db.addSchedule(t, everySecond("c-healthy", stages.Task{Body: "SELECT 2"}))
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
			return schedRunsWith(t, db, "c-healthy", dialect.RunEnqueued) >= 3 && schedRunsWith(t, db, "b-refused", dialect.RunFailed) >= 2
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

// TestScheduleBrokenPlanDoesNotStarveOthers: a schedule whose stored plan can no
// longer be enqueued has its ticks recorded as missed and advances, so the
// schedules due after it keep firing.
func TestScheduleBrokenPlanDoesNotStarveOthers(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		for _, name := range []string{"broken", "healthy"} {
			db.addSchedule(t, everySecond(name, stages.Task{Body: "SELECT 1"}))
		}
		// Corrupt the first one's stored plan behind the API's back.
		// PLAN is a reserved word in T-SQL: bracketed there.
		corrupt := `UPDATE stageq.schedules SET plan = '{"stages": []}' WHERE name = 'broken'`
		if db.Dialect == "sqlserver" {
			corrupt = `UPDATE stageq.Schedules SET [plan] = N'{"stages": []}' WHERE name = N'broken'`
		}
		db.exec(t, schedSQL(db, corrupt))
		startWorkers(t, db, 1, fastConfig(), nil)
		waitFor(t, 30*time.Second, "three runs of the healthy schedule", func() bool {
			return schedRunsWith(t, db, "healthy", dialect.RunEnqueued) >= 3
		})
		for _, r := range schedRuns(t, db, "broken") {
			if r.Outcome != dialect.RunMissed {
				t.Errorf("broken schedule's tick %s: outcome %s, want missed", r.ScheduledFor, r.Outcome)
			}
		}
		if n := schedLogRows(t, db, "broken"); n != 0 {
			t.Errorf("the broken schedule enqueued %d tasks", n)
		}
	})
}

// TestScheduleTickThatHasARunDoesNotBlock: a run-now recorded at the very
// instant of a schedule's next tick holds the run history's key for that tick.
// The scheduler counts it as the tick's run and moves on, and the schedules
// due after it keep firing. (Before, every fire of the tick met the key, was
// read as another worker's, and was tried again every 100 ms for ever.)
func TestScheduleTickThatHasARunDoesNotBlock(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		taken := everySecond("a-taken", stages.Task{Body: "SELECT 1"})
		taken.Start = schedDBNow(t, db).Truncate(time.Millisecond)
		db.addSchedule(t, taken)
		db.addSchedule(t, everySecond("b-healthy", stages.Task{Body: "SELECT 2"}))
		list, err := db.Client.Schedules(ctx, "a-taken")
		if err != nil || len(list) != 1 {
			t.Fatalf("schedules: %+v, %v", list, err)
		}
		// What `schedule run-now` records when the database's now is that tick.
		if err := db.D.ScheduleFire(ctx, nil, dialect.ScheduleFireParams{ScheduleID: list[0].ID, ScheduleName: "a-taken",
			WorkerID: "operator", ScheduledFor: taken.Start, Outcome: dialect.RunManual}); err != nil {
			t.Fatal(err)
		}
		startWorkers(t, db, 1, fastConfig(), nil)
		waitFor(t, 30*time.Second, "three runs of each schedule after the taken tick", func() bool {
			return schedRunsWith(t, db, "b-healthy", dialect.RunEnqueued) >= 3 && schedRunsWith(t, db, "a-taken", dialect.RunEnqueued) >= 3
		})
		runs := schedRuns(t, db, "a-taken")
		if first := runs[0]; !first.ScheduledFor.Equal(taken.Start) || first.Outcome != dialect.RunManual {
			t.Errorf("first run %+v; want the manual one at %s", first, taken.Start)
		}
		for _, r := range runs[1:] {
			if !r.ScheduledFor.After(taken.Start) {
				t.Errorf("run %+v at or before the taken tick %s", r, taken.Start)
			}
		}
	})
}

// schedRunsWith counts a schedule's runs whose outcome is outcome.
func schedRunsWith(t *testing.T, db *testDB, name, outcome string) int {
	t.Helper()
	n := 0
	for _, r := range schedRuns(t, db, name) {
		if r.Outcome == outcome {
			n++
		}
	}
	return n
}

// schedLogRows counts Logs rows of a schedule's runs.
func schedLogRows(t *testing.T, db *testDB, name string) int {
	t.Helper()
	return db.count(t, schedSQL(db, `SELECT count(*) FROM stageq.logs WHERE schedule_name = $1`), name)
}
