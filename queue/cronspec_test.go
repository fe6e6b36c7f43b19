package queue

import (
	"testing"
	"time"
)

// TestCronAcrossClockChanges: a schedule that names its hours fires once a day
// through both of a year's clock changes; one that runs every hour follows real
// time through them.
func TestCronAcrossClockChanges(t *testing.T) {
	utc := func(mo time.Month, d, h, m int) time.Time { return time.Date(2026, mo, d, h, m, 0, 0, time.UTC) }
	for _, c := range []struct {
		name, cron, zone string
		from             time.Time
		want             []time.Time
	}{
		{"spring: the skipped 02:00 fires at the change (03:00 CEST)", "0 2 * * *", "Europe/Paris",
			utc(3, 28, 1, 0), []time.Time{utc(3, 29, 1, 0), utc(3, 30, 0, 0)}},
		{"spring: every tick of the skipped hour fires once, at the change", "*/20 2 * * *", "Europe/Paris",
			utc(3, 29, 0, 30), []time.Time{utc(3, 29, 1, 0), utc(3, 30, 0, 0)}},
		{"spring: a tick the change does not touch keeps its time", "0 3 * * *", "Europe/Paris",
			utc(3, 28, 2, 0), []time.Time{utc(3, 29, 1, 0), utc(3, 30, 1, 0)}},
		{"autumn: the repeated 02:30 fires the first time only", "30 2 * * *", "Europe/Paris",
			utc(10, 24, 0, 30), []time.Time{utc(10, 25, 0, 30), utc(10, 26, 1, 30)}},
		{"autumn: no tick of the repeated hour fires twice", "*/30 2 * * *", "Europe/Paris",
			utc(10, 25, 0, 0), []time.Time{utc(10, 25, 0, 30), utc(10, 26, 1, 0)}},
		{"autumn: every hour is real time", "0 * * * *", "Europe/Paris",
			utc(10, 24, 23, 30), []time.Time{utc(10, 25, 0, 0), utc(10, 25, 1, 0), utc(10, 25, 2, 0)}},
		{"spring: every hour is real time", "0 * * * *", "Europe/Paris",
			utc(3, 29, 0, 0), []time.Time{utc(3, 29, 1, 0), utc(3, 29, 2, 0)}},
		{"New York, spring", "30 2 * * *", "America/New_York",
			utc(3, 7, 7, 30), []time.Time{utc(3, 8, 7, 0), utc(3, 9, 6, 30)}},
		{"New York, autumn", "30 1 * * *", "America/New_York",
			utc(10, 31, 5, 30), []time.Time{utc(11, 1, 5, 30), utc(11, 2, 6, 30)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, _, err := parseCron(c.cron, c.zone)
			if err != nil {
				t.Fatal(err)
			}
			at := c.from
			for i, want := range c.want {
				if at = (cronSpec{s}).next(at); !at.Equal(want) {
					t.Fatalf("tick %d = %s, want %s", i+1, at.UTC(), want)
				}
			}
		})
	}
}

// TestCronOnceADayInEveryKindOfZone walks two years of daily schedules through
// zones whose changes differ (an hour at 02:00, at midnight, half an hour, two
// hours, forty-five minutes off the hour, changes backwards for Ramadan): each
// local day has exactly one tick, at the schedule's time or at the change that
// skipped it, and ticks only move forward.
func TestCronOnceADayInEveryKindOfZone(t *testing.T) {
	zones := []string{"Europe/Paris", "America/New_York", "America/Santiago", "America/Havana",
		"Australia/Lord_Howe", "Antarctica/Troll", "Pacific/Chatham", "Africa/Casablanca", "Asia/Tehran", "UTC"}
	for _, zone := range zones {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		for expr, hhmm := range map[string]string{"0 0 * * *": "00:00", "30 1 * * *": "01:30",
			"0 2 * * *": "02:00", "45 2 * * *": "02:45", "59 23 * * *": "23:59"} {
			s, _, err := parseCron(expr, zone)
			if err != nil {
				t.Fatal(err)
			}
			spec := cronSpec{s}
			start := time.Date(2026, 1, 1, 12, 0, 0, 0, loc)
			days := map[string]int{}
			for at := spec.atOrAfter(start); at.Before(start.AddDate(2, 0, 0)); {
				local := at.In(loc)
				day := local
				if changed, _ := local.ZoneBounds(); changed.Equal(at) && local.Format("15:04") != hhmm {
					// A skipped tick counts for the day it was skipped on: the
					// change's date on the clock before the change.
					_, before := at.Add(-time.Nanosecond).In(loc).Zone()
					day = at.In(time.FixedZone("", before))
				}
				days[day.Format(time.DateOnly)]++
				if changed, _ := local.ZoneBounds(); local.Format("15:04") != hhmm && !changed.Equal(at) {
					t.Errorf("%s %q: tick at %s, neither its time nor a clock change", zone, expr, local)
				}
				n := spec.next(at)
				if !n.After(at) {
					t.Fatalf("%s %q: next(%s) = %s, not later", zone, expr, at, n)
				}
				at = n
			}
			for d := start.AddDate(0, 0, 1); d.Before(start.AddDate(2, 0, -1)); d = d.AddDate(0, 0, 1) {
				if k := d.Format(time.DateOnly); days[k] != 1 {
					t.Errorf("%s %q: %d ticks on %s", zone, expr, days[k], k)
				}
			}
		}
	}
}
