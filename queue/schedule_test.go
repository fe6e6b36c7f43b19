package queue

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/stages"
)

func TestTickSpecs(t *testing.T) {
	t0 := time.Date(2026, 3, 28, 10, 0, 0, 500_000_000, time.UTC)
	iv := intervalSpec{iv: time.Second, anchor: t0}
	for _, c := range []struct{ at, want time.Time }{
		{t0.Add(-time.Hour), t0},
		{t0, t0},
		{t0.Add(time.Nanosecond), t0.Add(time.Second)},
		{t0.Add(9*time.Second + 300*time.Millisecond), t0.Add(10 * time.Second)},
	} {
		if got := iv.atOrAfter(c.at); !got.Equal(c.want) {
			t.Errorf("interval atOrAfter(%s) = %s, want %s", c.at, got, c.want)
		}
	}
	// An anchor more than 292 years back (a start: far in the past) overflowed
	// the duration arithmetic: the first tick at or after t came out centuries
	// before the anchor, and the scheduler walked next_run back for ever.
	for _, c := range []struct {
		anchor time.Time
		iv     time.Duration
	}{
		{time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Hour},
		{time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC), time.Hour},
		{time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC), 7 * time.Second},
		{time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), 200 * 365 * 24 * time.Hour},
		{time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.Duration(math.MaxInt64)},
	} {
		got := intervalSpec{iv: c.iv, anchor: c.anchor}.atOrAfter(t0)
		// A tick, at or after t0, less than one interval after it.
		if got.Before(t0) || got.Sub(t0) >= c.iv {
			t.Errorf("interval %s from %s: atOrAfter(%s) = %s", c.iv, c.anchor, t0, got)
		}
		// In seconds: Sub saturates past 292 years.
		if ivs := int64(c.iv / time.Second); c.iv%time.Second == 0 && (got.Unix()-c.anchor.Unix())%ivs != 0 {
			t.Errorf("interval %s from %s: atOrAfter(%s) = %s, not a tick", c.iv, c.anchor, t0, got)
		}
	}
	// An interval's ticks stop at farFuture, the last time every dialect stores:
	// a next_run in the year 10000 broke SQLite (above).
	late := intervalSpec{iv: 24 * time.Hour, anchor: farFuture.Add(-time.Hour)}
	if got := late.next(late.anchor); !got.Equal(farFuture) {
		t.Errorf("next past farFuture = %s, want %s", got, farFuture)
	}
	if got := late.atOrAfter(farFuture.Add(-time.Minute)); !got.Equal(farFuture) {
		t.Errorf("atOrAfter past farFuture = %s, want %s", got, farFuture)
	}
	// Paris moves to summer time on 2026-03-29: 02:30 local does not exist that
	// day, and the zone, not the worker's, decides.
	c, expr, err := parseCron("0 30 6 * * *", "Europe/Paris")
	if err != nil || expr != "CRON_TZ=Europe/Paris 0 30 6 * * *" {
		t.Fatalf("parseCron = %q, %v", expr, err)
	}
	spec := cronSpec{c}
	if got, want := spec.next(t0), time.Date(2026, 3, 29, 4, 30, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("next after %s = %s, want %s (06:30 CEST)", t0, got, want)
	}
	exact := time.Date(2026, 3, 29, 4, 30, 0, 0, time.UTC)
	if got := spec.atOrAfter(exact); !got.Equal(exact) {
		t.Errorf("atOrAfter(a tick) = %s, want the tick itself", got)
	}
	five, _, err := parseCron("*/15 * * * *", "") // five fields: minutes first, UTC
	if err != nil {
		t.Fatal(err)
	}
	if got := (cronSpec{five}).next(t0); !got.Equal(time.Date(2026, 3, 28, 10, 15, 0, 0, time.UTC)) {
		t.Errorf("five-field next = %s", got)
	}
}

func TestDecideTick(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := dialect.ScheduleInfo{Name: "s", Interval: time.Second, NextRun: t0, Grace: 2 * time.Second, Missed: dialect.MissedSkip}
	spec := intervalSpec{iv: time.Second, anchor: t0}
	// Late, but within the grace: enqueued, and the next tick follows on.
	if d := decideTick(s, spec, t0.Add(1500*time.Millisecond)); !d.enqueue || d.outcome != dialect.RunEnqueued || !d.next.Equal(t0.Add(time.Second)) {
		t.Errorf("on time: %+v", d)
	}
	// Ten seconds late: skip drops the missed ticks and resumes at the first on-time one.
	now := t0.Add(10*time.Second + 200*time.Millisecond)
	if d := decideTick(s, spec, now); d.enqueue || d.outcome != dialect.RunMissed || !d.next.Equal(t0.Add(9*time.Second)) {
		t.Errorf("missed, skip: %+v", d)
	}
	s.Missed = dialect.MissedOnce
	if d := decideTick(s, spec, now); !d.enqueue || d.outcome != dialect.RunCaughtUp || !d.scheduledFor.Equal(t0) || !d.next.Equal(t0.Add(9*time.Second)) {
		t.Errorf("missed, once: %+v", d)
	}
}

func TestScheduleValidate(t *testing.T) {
	o := 1
	plan := stages.Plan{Stages: []stages.Stage{{Order: &o, Tasks: []stages.Task{{Body: "SELECT 1"}}}}}
	for _, s := range []Schedule{
		{Name: "", Every: stages.Duration(time.Second), Plan: plan},
		{Name: "x", Plan: plan},
		{Name: "x", Every: stages.Duration(-time.Second), Plan: plan},
		{Name: "x", Cron: "* * * * *", Every: stages.Duration(time.Second), Plan: plan},
		{Name: "x", Cron: "61 * * * *", Plan: plan},
		{Name: "x", Cron: "CRON_TZ=UTC", Plan: plan},
		{Name: "x", Cron: "@every 5s", Plan: plan},
		{Name: "x", Cron: "0 0 30 2 *", Plan: plan}, // 30 February never comes
		{Name: "x", Cron: "* * * * *", TimeZone: "Nowhere/Land", Plan: plan},
		// Go reads Local as the zone of the machine: each worker its own.
		{Name: "x", Cron: "0 2 * * *", TimeZone: "Local", Plan: plan},
		{Name: "x", Cron: "CRON_TZ=Local 0 2 * * *", Plan: plan},
		{Name: "x", Cron: "TZ=Local 0 2 * * *", Plan: plan},
		{Name: "x", Every: stages.Duration(time.Second), Missed: "twice", Plan: plan},
		{Name: "x", Every: stages.Duration(time.Second), Grace: stages.Duration(-time.Second), Plan: plan},
		{Name: "x", Every: stages.Duration(time.Second)},
		// Beyond what the databases store: SQLite's text sorted the year 10000
		// before every other time, and no read could parse it.
		{Name: "x", Every: stages.Duration(time.Hour), Start: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), Plan: plan},
		{Name: "x", Every: stages.Duration(time.Hour), Start: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), Plan: plan},
		// The year 1 east of UTC is the year 0 there, as the databases store it.
		{Name: "x", Every: stages.Duration(time.Hour), Start: time.Date(1, 1, 1, 0, 30, 0, 0, time.FixedZone("", 3600)), Plan: plan},
	} {
		if _, err := s.validate(); !errors.Is(err, ErrInvalidSchedule) {
			t.Errorf("%+v: err = %v, want ErrInvalidSchedule", s, err)
		}
	}
	// An interval below a second flooded the queue (--every 1ms: over a
	// thousand runs in seconds); a cron expression ticks once a second at most.
	for _, iv := range []time.Duration{time.Millisecond, 999 * time.Millisecond} {
		s := Schedule{Name: "x", Every: stages.Duration(iv), Plan: plan}
		if _, err := s.validate(); !errors.Is(err, ErrInvalidSchedule) || !strings.Contains(err.Error(), "at least 1s") {
			t.Errorf("every %s: err = %v, want ErrInvalidSchedule naming the 1s minimum", iv, err)
		}
	}
	second := Schedule{Name: "x", Every: stages.Duration(time.Second), Plan: plan}
	if _, err := second.validate(); err != nil {
		t.Errorf("every 1s: %v", err)
	}
	s := Schedule{Name: "ok", Every: stages.Duration(time.Minute), Plan: plan}
	if _, err := s.validate(); err != nil || s.Missed != dialect.MissedSkip || time.Duration(s.Grace) != DefaultScheduleGrace || s.Plan.Process != "ok" {
		t.Errorf("defaults: %+v, %v", s, err)
	}
}
