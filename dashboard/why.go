package dashboard

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stageq/stageq/dialect"
)

// Reason is one thing that holds a task back.
type Reason struct {
	// Code names the reason for scripts: running, failed, lower-stage, paused,
	// run-at, max-parallel, limit, no-worker, kind-worker, capacity, state, next.
	Code string `json:"code"`
	// Text says it in a sentence, with what to do about it where there is something.
	Text string `json:"text"`
	// Tasks are the tasks it names (the blockers or the holders), at most
	// dialect.WaitListMax.
	Tasks []dialect.TaskRef `json:"tasks,omitempty"`
	// Soft marks a reason that may not apply (evidence, not a rule).
	Soft bool `json:"soft,omitempty"`
}

// Explain turns the facts of dialect.TaskWait into reasons, hardest first.
// A running task gets one reason (it is not waiting); a failed one, one (it
// waits for an operator). Everything else gets every reason that applies now.
func Explain(w dialect.TaskWait) []Reason {
	t := w.Task
	switch t.State {
	case dialect.StateRunning:
		return []Reason{{Code: "running", Text: fmt.Sprintf("It is running on worker %s, attempt %s: it is not waiting.", t.WorkerID, AttemptOf(t))}}
	case dialect.StateFailed:
		msg := fmt.Sprintf("It failed for good after attempt %s", AttemptOf(t))
		if t.LastError != "" {
			msg += ": " + clip(t.LastError, 200)
		}
		return []Reason{{Code: "failed", Text: msg + fmt.Sprintf(". It waits for an operator: retry it (queuectl retry %d) or discard it; until then later stages of %s wait.", t.ID, t.Process)}}
	}
	var out []Reason
	if w.LowerCount > 0 && len(w.Lower) > 0 {
		low := w.Lower[0].Order
		var failed []string
		for _, r := range w.Lower {
			if r.State == dialect.StateFailed {
				failed = append(failed, fmt.Sprint(r.ID))
			}
		}
		text := fmt.Sprintf("Stage %d of process %s is not finished: %d unfinished task(s) at orders below %d, the lowest at %d (%s).",
			low, t.Process, w.LowerCount, t.Order, low, stateSummary(w.Lower))
		if len(failed) > 0 {
			text += fmt.Sprintf(" Task(s) %s failed for good and block it until retried or discarded.", strings.Join(failed, ", "))
		}
		out = append(out, Reason{Code: "lower-stage", Text: text, Tasks: w.Lower})
	}
	if w.Paused {
		out = append(out, Reason{Code: "paused", Text: fmt.Sprintf("Process %s is paused: no task of it starts until `queuectl resume %s`.", t.Process, shellArg(t.Process))})
	}
	if t.RunAt.After(w.Now) {
		why := "its run_at"
		if t.Attempt > 0 {
			why = fmt.Sprintf("the backoff after attempt %d", t.Attempt)
		}
		out = append(out, Reason{Code: "run-at", Text: fmt.Sprintf("It may not start before %s (%s from now): %s.",
			t.RunAt.UTC().Format("2006-01-02 15:04:05 UTC"), t.RunAt.Sub(w.Now).Round(time.Second), why)})
	}
	if w.MaxParallel != nil && w.ProcessRunningCount >= *w.MaxParallel {
		out = append(out, Reason{Code: "max-parallel", Text: fmt.Sprintf("Process %s runs %d task(s), its max_parallel is %d: the next starts when one of them ends.",
			t.Process, w.ProcessRunningCount, *w.MaxParallel), Tasks: w.ProcessRunning})
	}
	for _, l := range w.Limits {
		switch {
		case l.Max == 0:
			out = append(out, Reason{Code: "limit", Text: fmt.Sprintf("Limit %s is 0: its tasks do not start until it is raised (queuectl limit set %s N).", l.Key, shellArg(l.Key))})
		case l.Running >= l.Max:
			out = append(out, Reason{Code: "limit", Text: fmt.Sprintf("Limit %s is full: %d of %d slot(s) in use, held by the running task(s) below.", l.Key, l.Running, l.Max), Tasks: l.Holders})
		}
	}
	if w.LiveWorkers == 0 {
		out = append(out, Reason{Code: "no-worker", Text: "No live worker: none has heartbeated recently and not stopped. Start one (worker --dsn …)."})
	} else {
		if t.Kind != "sql" && len(w.KindWorkers) == 0 {
			out = append(out, Reason{Code: "kind-worker", Text: fmt.Sprintf("No live worker runs kind %q: a worker claims only the kinds it can run (sql always, exec with --allow-exec, any other kind once a handler is registered with Worker.Handle). Start one that does; the task waits, its attempts untouched.", t.Kind)})
		}
		// Busy slots matter only to a task nothing else holds back: beside a
		// lower stage or a pause they are noise.
		if w.Running >= w.LiveSlots && !slices.ContainsFunc(out, func(r Reason) bool { return r.Code == "lower-stage" || r.Code == "paused" }) {
			out = append(out, Reason{Code: "capacity", Text: fmt.Sprintf("Every live worker slot is busy: %d task(s) running on %d slot(s) of %d live worker(s).", w.Running, w.LiveSlots, w.LiveWorkers)})
		}
	}
	if len(out) == 0 {
		switch t.State {
		case dialect.StateAvailable:
			out = append(out, Reason{Code: "next", Text: "Nothing holds it back: the next claim with a free slot takes it (processes are served in turn, by priority and weight)."})
		case dialect.StateBlocked:
			out = append(out, Reason{Code: "state", Text: "It is blocked and no lower stage is left: its stage opens once the previous stage's last finish is recorded (a worker advances the process, or repairs it at its next rescue pass)."})
		case dialect.StateScheduled:
			out = append(out, Reason{Code: "next", Text: "Its run_at has passed: the next claim makes it available and it takes its turn."})
		default:
			out = append(out, Reason{Code: "state", Text: fmt.Sprintf("It is in state %q.", t.State)})
		}
	}
	return out
}

// stateSummary counts task references by state: "2 running, 1 failed".
func stateSummary(refs []dialect.TaskRef) string {
	counts := map[string]int{}
	var order []string
	for _, r := range refs {
		if counts[r.State] == 0 {
			order = append(order, r.State)
		}
		counts[r.State]++
	}
	parts := make([]string, len(order))
	for i, s := range order {
		parts[i] = fmt.Sprintf("%d %s", counts[s], s)
	}
	s := strings.Join(parts, ", ")
	if len(refs) == dialect.WaitListMax {
		s = "first ones: " + s
	}
	return s
}

// shellArg is s as one argument of a command to paste into a shell: as it is
// when it holds nothing a shell reads specially, else in single quotes (a
// process name is whatever its submitter chose: spaces, <, ;, $(…)); after
// "--" when it would read as a flag.
func shellArg(s string) string {
	plain := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:/@%+=,-", r)) {
			plain = false
			break
		}
	}
	if !plain {
		s = "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	if strings.HasPrefix(s, "-") {
		s = "-- " + s
	}
	return s
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// AttemptOf is a task's attempt of its max_attempts, with the attempts lost to
// infrastructure that its number counts and max_attempts does not ("2 of 1"
// alone reads as past its limit).
func AttemptOf(t dialect.TaskInfo) string {
	if t.Abandons == 0 {
		return fmt.Sprintf("%d of %d", t.Attempt, t.MaxAttempts)
	}
	return fmt.Sprintf("%d of %d (%d abandoned, not counted)", t.Attempt, t.MaxAttempts, t.Abandons)
}
