package queue

import (
	"archive/zip"
	"io"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// TestCronAcrossClockChanges: a schedule that names its hours fires once a day
// through both of a year's clock changes; one that runs every hour follows real
// time through them.
func TestCronAcrossClockChanges(t *testing.T) {
	// Each case: zone, expression, where to start, then the ticks wanted, all
	// in UTC on 2026's dates.
	for name, c := range map[string][4]string{
		"spring: the skipped 02:00 fires at the change (03:00 CEST)":       {"Europe/Paris", "0 2 * * *", "03-28 01:00", "03-29 01:00, 03-30 00:00"},
		"spring: every tick of the skipped hour fires once, at the change": {"Europe/Paris", "*/20 2 * * *", "03-29 00:30", "03-29 01:00, 03-30 00:00"},
		"spring: a tick the change does not touch keeps its time":          {"Europe/Paris", "0 3 * * *", "03-28 02:00", "03-29 01:00, 03-30 01:00"},
		"spring: every hour is real time":                                  {"Europe/Paris", "0 * * * *", "03-29 00:00", "03-29 01:00, 03-29 02:00"},
		"spring: every hour, the skipped half past is not made up":         {"Europe/Paris", "30 * * * *", "03-29 00:30", "03-29 01:30, 03-29 02:30"},
		"autumn: the repeated 02:30 fires the first time only":             {"Europe/Paris", "30 2 * * *", "10-24 00:30", "10-25 00:30, 10-26 01:30"},
		"autumn: no tick of the repeated hour fires twice":                 {"Europe/Paris", "*/30 2 * * *", "10-25 00:00", "10-25 00:30, 10-26 01:00"},
		"autumn: every hour is real time":                                  {"Europe/Paris", "0 * * * *", "10-24 23:30", "10-25 00:00, 10-25 01:00, 10-25 02:00"},
		"New York, spring":                                                 {"America/New_York", "30 2 * * *", "03-07 07:30", "03-08 07:00, 03-09 06:30"},
		"New York, autumn":                                                 {"America/New_York", "30 1 * * *", "10-31 05:30", "11-01 05:30, 11-02 06:30"},
	} {
		t.Run(name, func(t *testing.T) {
			utc := func(s string) time.Time {
				at, err := time.Parse("2006-01-02 15:04", "2026-"+s)
				if err != nil {
					t.Fatal(err)
				}
				return at
			}
			s, _, err := parseCron(c[1], c[0])
			if err != nil {
				t.Fatal(err)
			}
			at := utc(c[2])
			for i, w := range strings.Split(c[3], ", ") {
				if at = (cronSpec{s}).next(at); !at.Equal(utc(w)) {
					t.Fatalf("tick %d = %s, want %s", i+1, at.UTC(), utc(w))
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

// TestCronPastTheZoneDatasLastListedChange: Go's own zone data (what
// time/tzdata embeds, and what a host without zone files reads) lists no
// changes ahead; Go derives them from each zone's rule, and in a leap year ends
// the last stretch of the year at 31 December 00:00 UTC, giving that end again
// for every instant of that day. Ticks walk through it.
func TestCronPastTheZoneDatasLastListedChange(t *testing.T) {
	zr, err := zip.OpenReader(filepath.Join(runtime.GOROOT(), "lib", "time", "zoneinfo.zip"))
	if err != nil {
		t.Fatalf("Go's zone data: %v", err)
	}
	defer zr.Close()
	for _, zone := range []string{"Europe/Paris", "America/New_York", "Australia/Sydney"} {
		f, err := zr.Open(zone)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		loc, err := time.LoadLocationFromTZData(zone, data)
		if err != nil {
			t.Fatal(err)
		}
		for expr, want := range map[string]int{"0 12 * * *": 7, "*/15 * * * *": 7 * 96, "@yearly": 1} {
			s, _, err := parseCron(expr, "")
			if err != nil {
				t.Fatal(err)
			}
			sp := *s.(*cron.SpecSchedule)
			sp.Location = loc
			from, to := time.Date(2028, 12, 28, 0, 0, 0, 0, loc), time.Date(2029, 1, 4, 0, 0, 0, 0, loc)
			done := make(chan int, 1)
			go func() {
				n := 0
				for at := (cronSpec{&sp}).atOrAfter(from); at.Before(to); at = (cronSpec{&sp}).next(at) {
					n++
				}
				done <- n
			}()
			select {
			case n := <-done:
				if n != want {
					t.Errorf("%s %q: %d ticks from %s to %s, want %d", zone, expr, n, from, to, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s %q: the ticks from %s to %s took more than 10 s: the walk stands still", zone, expr, from, to)
			}
		}
	}
}
