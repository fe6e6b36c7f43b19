package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// ScheduleFire: a tick that has its run row already is ErrTickRecorded (an
// ErrConflict); Recorded advances it without a second row, still fenced by
// next_run.
func contractScheduleFire(t *testing.T, db *testDB) {
	ctx := context.Background()
	now, err := db.D.ClockNow(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tick := now.Add(time.Hour).Truncate(time.Second)
	id, err := db.D.ScheduleCreate(ctx, nil, dialect.ScheduleCreateParams{Name: "c-fire", Interval: time.Hour,
		Plan: `{"stages":[{"order":1,"tasks":[{"body":"x"}]}]}`, Missed: dialect.MissedSkip, Grace: time.Minute, NextRun: tick})
	if err != nil {
		t.Fatal(err)
	}
	fire := func(p dialect.ScheduleFireParams) error {
		t.Helper()
		p.ScheduleID, p.ScheduleName, p.WorkerID, p.ScheduledFor = id, "c-fire", "w1", tick
		return fireLocked(t, db, p)
	}
	// A run-now recorded at the instant of the next tick.
	if err := fire(dialect.ScheduleFireParams{Outcome: dialect.RunManual}); err != nil {
		t.Fatalf("record a manual run: %v", err)
	}
	advance := dialect.ScheduleFireParams{Outcome: dialect.RunEnqueued, Advance: true, PrevNextRun: tick, NextRun: tick.Add(time.Hour)}
	if err := fire(advance); !errors.Is(err, dialect.ErrTickRecorded) || !errors.Is(err, dialect.ErrConflict) {
		t.Fatalf("fire a tick that has its run: %v; want ErrTickRecorded, an ErrConflict", err)
	}
	moved := advance
	moved.Recorded, moved.PrevNextRun = true, tick.Add(time.Minute)
	if err := fire(moved); !errors.Is(err, dialect.ErrConflict) || errors.Is(err, dialect.ErrTickRecorded) {
		t.Fatalf("advance from a next_run that is not the schedule's: %v; want ErrConflict only", err)
	}
	advance.Recorded = true
	if err := fire(advance); err != nil {
		t.Fatalf("advance a tick that has its run, recording none: %v", err)
	}
	list, err := db.D.ScheduleList(ctx, dialect.ScheduleFilter{Name: "c-fire"})
	if err != nil || len(list) != 1 || !list[0].NextRun.Equal(tick.Add(time.Hour)) {
		t.Fatalf("schedule after the advance: %+v, %v; want next_run %s", list, err, tick.Add(time.Hour))
	}
	runs, err := db.D.ScheduleRunList(ctx, dialect.ScheduleRunFilter{Name: "c-fire"})
	if err != nil || len(runs) != 1 || runs[0].Outcome != dialect.RunManual || !runs[0].ScheduledFor.Equal(tick) {
		t.Fatalf("runs: %+v, %v; want the one manual run at %s", runs, err, tick)
	}
}

// fireLocked records a tick as a worker's scheduler does: ScheduleFire in a
// transaction that holds the schedule's lock. The test fails on errors of the
// transaction; ScheduleFire's own is returned.
func fireLocked(t *testing.T, db *testDB, p dialect.ScheduleFireParams) error {
	t.Helper()
	ctx := context.Background()
	tx, err := db.D.BeginTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, _, err := db.D.ScheduleLock(ctx, tx, p.ScheduleName); err != nil {
		t.Fatal(err)
	}
	if err := db.D.ScheduleFire(ctx, tx, p); err != nil {
		return err
	}
	return tx.Commit()
}
