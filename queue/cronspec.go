package queue

import (
	"time"

	"github.com/robfig/cron/v3"
)

// cronSpec computes the ticks of a cron expression in its time zone. Where the
// zone changes its clocks, a schedule that names its hours (`0 2 * * *`,
// `30 */6 * * *`) means wall-clock times:
//
//   - a tick whose time the spring change skips fires once, at the change
//     (03:00 where 02:00 to 03:00 does not exist);
//   - a time that the autumn change repeats fires the first time only.
//
// A schedule that runs every hour (`*/15 * * * *`, `@hourly`) follows real
// time: the skipped hour has no instants to fire in, and the repeated hour is
// an hour like any other, so it fires in both passes.
//
// robfig/cron walks the fields in the zone itself, and around a change its walk
// drops the skipped tick, fires the repeated one twice, and in zones that
// change by half an hour loses whole days. Its walk is exact in a zone of fixed
// offset, so each stretch between two changes is searched in one.
type cronSpec struct{ s cron.Schedule }

// allHours is the Hour field of a schedule that matches every hour.
const allHours = 1<<24 - 1

// cronHorizon is how far ahead a tick is looked for, as cron's own walk does.
const cronHorizon = 5 * 366 * 24 * time.Hour

func (c cronSpec) next(t time.Time) time.Time {
	sp, ok := c.s.(*cron.SpecSchedule)
	if !ok || sp.Location == nil {
		if n := c.s.Next(t); !n.IsZero() {
			return n
		}
		return farFuture
	}
	// Each pass moves t past a repeated hour; a zone changes at most twice a day.
	for range 4 {
		n := matches(sp, t)
		if n.IsZero() {
			return farFuture
		}
		if sp.Hour&allHours == allHours {
			return n
		}
		if g, ok := skippedTick(sp, t, n); ok {
			return g
		}
		// A tick in the second pass of a repeated hour had its wall-clock time at
		// or before t, else matches would have found that first pass.
		end, repeated := repeatedUntil(n, sp.Location)
		if !repeated {
			return n
		}
		t = end.Add(-time.Nanosecond)
	}
	return farFuture
}

// cron's Next rounds up to the next whole second strictly after its argument, so
// one nanosecond earlier gives the first tick at or after t.
func (c cronSpec) atOrAfter(t time.Time) time.Time { return c.next(t.Add(-time.Nanosecond)) }

// matches is the first instant strictly after t whose wall-clock time in the
// schedule's zone matches its fields; zero when there is none within the horizon.
func matches(sp *cron.SpecSchedule, t time.Time) time.Time {
	fixed := *sp
	for from, in := t, t; from.Sub(t) < cronHorizon; {
		local := in.In(sp.Location)
		name, offset := local.Zone()
		fixed.Location = time.FixedZone(name, offset)
		n := fixed.Next(from)
		change := stretchEnd(in, sp.Location)
		if n.IsZero() || change.IsZero() || n.Before(change) {
			return n.In(sp.Location)
		}
		// The next stretch, searched from its first instant on.
		from, in = change.Add(-time.Nanosecond), change
	}
	return time.Time{}
}

// skippedTick finds a clock change forward strictly after t and at or before n
// that skipped a wall-clock time the schedule names, and returns the instant of
// that change: the skipped tick fires there, late by the gap.
func skippedTick(sp *cron.SpecSchedule, t, n time.Time) (time.Time, bool) {
	for at := t.In(sp.Location); ; {
		_, before := at.Zone()
		change := stretchEnd(at, sp.Location)
		if change.IsZero() || change.After(n) {
			return time.Time{}, false
		}
		at = change.In(sp.Location)
		_, after := at.Zone()
		if gap := time.Duration(after-before) * time.Second; gap > 0 {
			// The skipped wall-clock times are those the old offset gives the
			// instants [change, change+gap); ask the schedule in that fixed zone.
			old := *sp
			old.Location = time.FixedZone("", before)
			if m := old.Next(change.Add(-time.Nanosecond)); !m.IsZero() && m.Before(change.Add(gap)) {
				return change, true
			}
		}
	}
}

// repeatedUntil reports whether n lies in the second pass of an hour the zone
// repeats (its wall-clock time already came once, under the earlier offset),
// and when that repetition ends.
func repeatedUntil(n time.Time, loc *time.Location) (time.Time, bool) {
	at := n.In(loc)
	start, _ := at.ZoneBounds()
	if start.IsZero() {
		return time.Time{}, false
	}
	_, now := at.Zone()
	_, earlier := start.Add(-time.Nanosecond).In(loc).Zone()
	back := time.Duration(earlier-now) * time.Second
	if back <= 0 || !n.Before(start.Add(back)) {
		return time.Time{}, false
	}
	return start.Add(back), true
}

// stretchEnd is the end of the stretch of one offset that holds t in loc (an
// instant after t), or zero when the offset never changes again. It is
// ZoneBounds' end, except where that is not after t: for years past the last
// change that zone data lists, Go derives the changes from the zone's rule and
// has been seen to end a leap year's last stretch at 31 December 00:00 UTC,
// and to give that same end for every instant of that day, so a walk from one
// stretch to the next would stand still. There the offset is looked at a day
// later instead: the same, the stretch goes on at least that far; another,
// the change is searched for to the second in between.
func stretchEnd(t time.Time, loc *time.Location) time.Time {
	_, end := t.In(loc).ZoneBounds()
	if end.IsZero() || end.After(t) {
		return end
	}
	_, off := t.In(loc).Zone()
	lo, hi := t, t.Add(24*time.Hour)
	if _, o := hi.In(loc).Zone(); o == off {
		return hi
	}
	for hi.Sub(lo) > time.Second { // zone changes fall on whole seconds
		mid := lo.Add(hi.Sub(lo) / 2)
		if _, o := mid.In(loc).Zone(); o == off {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi.Truncate(time.Second)
}
