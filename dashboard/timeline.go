package dashboard

import (
	"fmt"
	"sort"
	"time"

	"github.com/stageq/stageq/dialect"
)

// The stage timeline: one row per attempt on a shared time axis, rows grouped by
// ExecutionOrder, drawn as inline SVG by timeline.html. Geometry is computed here
// so the template only places shapes.
const (
	tlWidth   = 1100 // SVG width in px
	tlLabel   = 260  // left column for the row labels
	tlRow     = 18   // height of an attempt's row
	tlHeader  = 22   // height of a stage's header row
	tlAxis    = 28   // top axis
	tlMaxRows = 400  // attempts drawn at most
	tlNotes   = 180  // right margin for the notes after the last bars: "discarded by an operator" at 11px monospace
)

// Timeline is the drawable model of a process's attempts.
type Timeline struct {
	Width, Height int
	Start, End    time.Time
	Ticks         []Tick
	Stages        []StageBand
	Rows          []AttemptRow
	Truncated     bool // earlier attempts were left out
	Drawn         int  // attempts drawn
	Empty         bool
}

// Tick is a label on the time axis.
type Tick struct {
	X     float64
	Label string
}

// StageBand is a stage's header row and the span of its attempts.
type StageBand struct {
	Order      int
	Y          int
	X1, X2     float64 // first start to last end
	Attempts   int
	Tasks      int
	Duration   string
	RowsHeight int
}

// AttemptRow is one attempt.
type AttemptRow struct {
	Y        int
	X, W     float64
	Label    string
	Title    string
	Outcome  string
	Retry    bool // a later attempt of a task that had failed, or was abandoned
	Marker   string
	TaskID   int64
	Attempt  int
	Abandon  bool
	Running  bool
	Audit    bool // an operator's action (retried, discarded, cancelled), not an attempt
	EndX     float64
	TextX    float64
	Duration string
}

// BuildTimeline lays out Logs entries (any order) at the database's now.
func BuildTimeline(entries []dialect.LogEntry, now time.Time) Timeline {
	tl := Timeline{Width: tlWidth}
	if len(entries) == 0 {
		tl.Empty, tl.Height = true, tlAxis+tlRow
		return tl
	}
	es := append([]dialect.LogEntry(nil), entries...)
	if len(es) > tlMaxRows {
		// The latest attempts: a long process's live end, not its start.
		sort.SliceStable(es, func(i, j int) bool {
			if !es[i].StartedAt.Equal(es[j].StartedAt) {
				return es[i].StartedAt.After(es[j].StartedAt)
			}
			return es[i].ID > es[j].ID
		})
		tl.Truncated = true
		es = es[:tlMaxRows]
	}
	tl.Drawn = len(es)
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if a.Order != b.Order {
			return a.Order < b.Order
		}
		if a.TaskID != b.TaskID {
			return a.TaskID < b.TaskID
		}
		// By time, not attempt: an operator's retry starts the attempts over.
		if !a.StartedAt.Equal(b.StartedAt) {
			return a.StartedAt.Before(b.StartedAt)
		}
		return a.ID < b.ID
	})
	end := func(e dialect.LogEntry) time.Time {
		if e.EndedAt != nil {
			return *e.EndedAt
		}
		return now
	}
	tl.Start, tl.End = es[0].StartedAt, end(es[0])
	for _, e := range es {
		if e.StartedAt.Before(tl.Start) {
			tl.Start = e.StartedAt
		}
		if end(e).After(tl.End) {
			tl.End = end(e)
		}
	}
	span := tl.End.Sub(tl.Start)
	if span <= 0 {
		span = time.Millisecond
	}
	plot := float64(tlWidth - tlLabel - tlNotes)
	x := func(t time.Time) float64 { return float64(tlLabel) + plot*float64(t.Sub(tl.Start))/float64(span) }
	tl.Ticks = ticks(tl.Start, span, x)

	y := tlAxis
	seen := map[int64]bool{} // tasks with an earlier attempt drawn
	for i := 0; i < len(es); {
		j := i
		for j < len(es) && es[j].Order == es[i].Order {
			j++
		}
		band := StageBand{Order: es[i].Order, Y: y, X1: x(es[i].StartedAt), X2: x(end(es[i]))}
		first, last := es[i].StartedAt, end(es[i])
		tasks := map[int64]bool{}
		y += tlHeader
		for _, e := range es[i:j] {
			tasks[e.TaskID] = true
			if !isAudit(e.Outcome) {
				band.Attempts++
			}
			if e.StartedAt.Before(first) {
				first = e.StartedAt
			}
			if end(e).After(last) {
				last = end(e)
			}
			r := AttemptRow{Y: y, X: x(e.StartedAt), Outcome: string(e.Outcome), TaskID: e.TaskID, Attempt: e.Attempt,
				Retry: seen[e.TaskID] || e.Attempt > 1, Abandon: e.Outcome == dialect.OutcomeAbandoned, Running: e.EndedAt == nil}
			r.EndX = x(end(e))
			r.W = max(r.EndX-r.X, 2)
			r.TextX = r.X + r.W + 4
			r.Duration = fmtDur(end(e).Sub(e.StartedAt))
			r.Label = fmt.Sprintf("task %d · attempt %d · %s", e.TaskID, e.Attempt, clip(e.WorkerID, 18))
			r.Audit = isAudit(e.Outcome)
			switch {
			case r.Audit:
				r.Label = fmt.Sprintf("task %d · %s", e.TaskID, clip(e.WorkerID, 26))
				r.Marker = string(e.Outcome) + " by an operator"
				r.W, r.Retry, r.Duration, r.TextX = 0, false, "", r.X+10
			case r.Abandon:
				r.Marker = "abandoned"
			case e.Outcome == dialect.OutcomeFailed && e.RetryAt != nil:
				r.Marker = "failed, retried"
			case e.Outcome == dialect.OutcomeFailed:
				r.Marker = "failed for good"
			case e.Outcome == dialect.OutcomeReleased:
				r.Marker = "released"
			case r.Retry:
				r.Marker = "retry"
			}
			r.Title = fmt.Sprintf("task %d (order %d) attempt %d on %s\n%s → %s (%s)\n%s %s", e.TaskID, e.Order, e.Attempt,
				e.WorkerID, e.StartedAt.UTC().Format("15:04:05.000"), endLabel(e), r.Duration, e.Outcome, clip(e.Error, 160))
			seen[e.TaskID] = true
			tl.Rows = append(tl.Rows, r)
			y += tlRow
		}
		band.X1, band.X2 = x(first), x(last)
		band.Tasks = len(tasks)
		band.Duration = fmtDur(last.Sub(first))
		band.RowsHeight = y - band.Y
		tl.Stages = append(tl.Stages, band)
		i = j
	}
	tl.Height = y + 6
	return tl
}

// isAudit tells an operator's Logs row from an attempt's.
func isAudit(o dialect.Outcome) bool {
	return o == dialect.OutcomeRetried || o == dialect.OutcomeDiscarded || o == dialect.OutcomeCancelled
}

func endLabel(e dialect.LogEntry) string {
	if e.EndedAt == nil {
		return "running"
	}
	return e.EndedAt.UTC().Format("15:04:05.000")
}

// ticks places 4–8 round labels on the axis.
func ticks(start time.Time, span time.Duration, x func(time.Time) float64) []Tick {
	steps := []time.Duration{time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond,
		100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
		5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 10 * time.Minute,
		30 * time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour}
	step := steps[len(steps)-1]
	for _, s := range steps {
		if span/s <= 8 {
			step = s
			break
		}
	}
	var out []Tick
	for d := time.Duration(0); d <= span; d += step {
		out = append(out, Tick{X: x(start.Add(d)), Label: "+" + fmtDur(d)})
	}
	return out
}

// fmtDur is a short duration: 850ms, 3.2s, 4m05s, 2h10m.
func fmtDur(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d == 0:
		return "0"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
