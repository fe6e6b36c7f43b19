package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// TestScheduleLongOutageKeepsItsRecord: a schedule nobody fired for eight days
// (every worker down, or the schedule paused; here its first tick lies eight
// days back) records its missed ticks (policy skip) or its catch-up run
// (policy once) under the first missed tick, and `schedule runs` keeps that
// record. The history is pruned a week after a tick was handled, not a week
// after its time: it was pruned by the tick's time in the very transaction that
// wrote it, so the one record of the outage vanished, and the catch-up run's
// tasks belonged to a run the history did not have.
func TestScheduleLongOutageKeepsItsRecord(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		start := schedDBNow(t, db).Add(-8 * 24 * time.Hour).Truncate(time.Second)
		for _, missed := range []string{dialect.MissedSkip, dialect.MissedOnce} {
			s := everySecond("outage-"+missed, stages.Task{Body: "SELECT 1"})
			s.Every, s.Start, s.Missed = stages.Duration(time.Hour), start, missed
			db.addSchedule(t, s)
		}
		startWorkers(t, db, 1, fastConfig(), nil)
		for _, missed := range []string{dialect.MissedSkip, dialect.MissedOnce} {
			name := "outage-" + missed
			waitFor(t, 20*time.Second, name+" to handle its first tick", func() bool {
				list, err := db.Client.Schedules(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				return len(list) == 1 && list[0].LastRun != nil
			})
			want, tasks := dialect.RunMissed, 0
			if missed == dialect.MissedOnce {
				want, tasks = dialect.RunCaughtUp, 1
			}
			runs := schedRuns(t, db, name)
			if len(runs) == 0 || !runs[0].ScheduledFor.Equal(start) || runs[0].Outcome != want || runs[0].TaskCount != tasks {
				t.Errorf("%s: runs %+v; want first a %s run of tick %s with %d task(s)", name, runs, want, start, tasks)
			}
		}
	})
}

// TestScheduleRunHistoryPruned: ScheduleFire's PruneBefore deletes the runs
// whose tick and handling both came before the cut-off, and keeps a run handled
// since, however old its tick.
func TestScheduleRunHistoryPruned(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		now := schedDBNow(t, db).Truncate(time.Second)
		id, err := db.D.ScheduleCreate(ctx, nil, dialect.ScheduleCreateParams{Name: "hist", Interval: time.Hour,
			Plan: `{"stages":[{"order":1,"tasks":[{"body":"x"}]}]}`, Missed: dialect.MissedSkip, Grace: time.Minute,
			NextRun: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		record := func(tick, pruneBefore time.Time) {
			t.Helper()
			if err := fireLocked(t, db, dialect.ScheduleFireParams{ScheduleID: id, ScheduleName: "hist",
				WorkerID: "w", ScheduledFor: tick, Outcome: dialect.RunManual, PruneBefore: pruneBefore}); err != nil {
				t.Fatal(err)
			}
		}
		day := 24 * time.Hour
		old, handledLate := now.Add(-10*day), now.Add(-9*day)
		record(old, time.Time{})
		record(handledLate, time.Time{})
		// The first was handled at its time; the second only now.
		table := "stageq.schedule_runs"
		if db.Dialect == "sqlserver" {
			table = "stageq.ScheduleRuns"
		}
		db.exec(t, schedSQL(db, `UPDATE `+table+` SET fired_at = scheduled_for WHERE scheduled_for = $1`), dbTime(db, old))
		record(now, now.Add(-7*day))
		var ticks []time.Time
		for _, r := range schedRuns(t, db, "hist") {
			ticks = append(ticks, r.ScheduledFor.UTC())
		}
		if len(ticks) != 2 || !ticks[0].Equal(handledLate.UTC()) || !ticks[1].Equal(now.UTC()) {
			t.Errorf("runs kept %v; want %s (handled within the week) and %s", ticks, handledLate.UTC(), now.UTC())
		}
	})
}

// dbTime is t as the dialect's statements take it (SQLite stores text).
func dbTime(db *testDB, t time.Time) any {
	if db.Dialect == "sqlite" {
		return t.UTC().Format("2006-01-02 15:04:05.000")
	}
	return t
}

// TestScheduleSingletonWaitsOutAFailedRun: what "unfinished" means to a
// singleton. A run whose task failed for good is still in the queue: every
// tick is skipped until the task is discarded, and then runs are enqueued
// again. (README, Recurring schedules.)
func TestScheduleSingletonWaitsOutAFailedRun(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		s := everySecond("single-fail", stages.Task{Kind: "boom", Body: "x", MaxAttempts: 1})
		s.Singleton = true
		db.addSchedule(t, s)
		startWorkers(t, db, 1, fastConfig(), func(w *queue.Worker) {
			w.Handle("boom", func(context.Context, *queue.Task) error { return errors.New("boom") })
		})
		failed := func() int {
			return db.count(t, schedSQL(db, `SELECT count(*) FROM stageq.tasks WHERE schedule_name = $1 AND state = 'failed'`), "single-fail")
		}
		waitFor(t, 30*time.Second, "the first run to fail for good", func() bool { return failed() == 1 })
		enqueued := schedRunsWith(t, db, "single-fail", dialect.RunEnqueued)
		skipped := schedRunsWith(t, db, "single-fail", dialect.RunSkipped)
		waitFor(t, 30*time.Second, "three more ticks", func() bool {
			return schedRunsWith(t, db, "single-fail", dialect.RunSkipped) >= skipped+3
		})
		if n := schedRunsWith(t, db, "single-fail", dialect.RunEnqueued); n != enqueued {
			t.Errorf("%d runs enqueued while the failed run was in the queue, want none", n-enqueued)
		}
		if _, err := limOperator(t, db).ProcessDiscard(ctx, "single-fail"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "a run after the discard", func() bool {
			return schedRunsWith(t, db, "single-fail", dialect.RunEnqueued) > enqueued
		})
	})
}
