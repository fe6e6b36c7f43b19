package dashboard_test

import (
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stageq/stageq/dashboard"
	"github.com/stageq/stageq/dialect"
)

// TestTimelineNotesFitTheSVG: the note after the last bar of the timeline
// ("59.9s · failed for good", "discarded by an operator") fits inside the SVG.
// Before, the right margin was 150px, and such a note, at 11px monospace
// (0.6em a character), ran to 1120px of an 1100px SVG: a process's last
// event read "cancelled by an operato".
func TestTimelineNotesFitTheSVG(t *testing.T) {
	const charWidth = 0.61 * 11 // a monospace advance at the timeline's font size, with a little slack
	t0 := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	entries := []dialect.LogEntry{
		{ID: 1, TaskID: 1, Order: 100, Attempt: 1, WorkerID: "w1", StartedAt: t0, EndedAt: at(2 * time.Second), Outcome: dialect.OutcomeSucceeded},
		{ID: 2, TaskID: 2, Order: 100, Attempt: 1, WorkerID: "w1", StartedAt: t0.Add(time.Second), EndedAt: at(time.Minute - 100*time.Millisecond), Outcome: dialect.OutcomeFailed},
		{ID: 3, TaskID: 2, Order: 100, WorkerID: "dashboard@host", StartedAt: t0.Add(time.Minute - 100*time.Millisecond), EndedAt: at(time.Minute - 100*time.Millisecond), Outcome: dialect.OutcomeDiscarded},
		{ID: 4, TaskID: 3, Order: 200, WorkerID: "dashboard@host", StartedAt: t0.Add(time.Minute - 100*time.Millisecond), EndedAt: at(time.Minute - 100*time.Millisecond), Outcome: dialect.OutcomeCancelled},
	}
	tl := dashboard.BuildTimeline(entries, t0.Add(time.Minute))
	for _, r := range tl.Rows {
		note := r.Duration
		if r.Marker != "" {
			if note != "" {
				note += " · "
			}
			note += r.Marker
		}
		if right := r.TextX + charWidth*float64(utf8.RuneCountInString(note)); right > float64(tl.Width) {
			t.Errorf("task %d: note %q runs to %.0fpx of a %dpx timeline: cut off", r.TaskID, note, right, tl.Width)
		}
	}
}
