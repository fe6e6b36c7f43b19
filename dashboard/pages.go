package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stageq/stageq/dialect"
)

// Page sizes: every list the dashboard reads is bounded.
const (
	taskPageMax    = 500
	processPageMax = 500 // processes on the list, by name, stage counts included
	explainInline  = 10  // tasks on a list whose reasons are shown inline (8 short reads each, every refresh)
	logPageSize    = 100
)

func (s *Server) processes(r *http.Request) (string, any, error) {
	all := r.URL.Query().Get("all") != ""
	ps, err := s.op.ProcessList(r.Context(), dialect.ProcessFilter{All: all, Limit: processPageMax + 1})
	if err != nil {
		return "", nil, err
	}
	capped := len(ps) > processPageMax
	if capped {
		ps = ps[:processPageMax]
	}
	return "Processes", map[string]any{"Processes": ps, "All": all, "Capped": capped, "Max": processPageMax}, nil
}

// timelineWindows are the spans of Logs a process page can draw.
var timelineWindows = []struct{ Key, Label string }{{"1h", "last hour"}, {"24h", "last day"}, {"168h", "last week"}, {"all", "everything"}}

func (s *Server) process(r *http.Request) (string, any, error) {
	ctx := r.Context()
	name := r.PathValue("name")
	if r.URL.Path == "/process" {
		name = r.URL.Query().Get("name")
		if name == "" { // no name would list every process
			return "", nil, fmt.Errorf("process: give ?name=: %w", errBadInput)
		}
	}
	ps, err := s.op.ProcessList(ctx, dialect.ProcessFilter{Name: name, All: true})
	if err != nil {
		return "", nil, err
	}
	window := r.URL.Query().Get("window")
	// The latest attempts: a long process's live end, not its start. One
	// more than the timeline draws tells it that earlier ones exist.
	// By name and id: the process as it is now (not an earlier one of its
	// name), found through whichever the dialect indexes.
	f := dialect.LogFilter{Process: name, ProcessID: ps[0].ID, Limit: tlMaxRows + 1, Newest: true}
	switch window {
	case "all":
	case "1h", "168h":
		d, _ := time.ParseDuration(window)
		f.Since = time.Now().Add(-d)
	default:
		window = "24h"
		f.Since = time.Now().Add(-24 * time.Hour)
	}
	entries, err := s.d.LogList(ctx, f)
	if err != nil {
		return "", nil, err
	}
	now, err := s.d.ClockNow(ctx, nil)
	if err != nil {
		return "", nil, err
	}
	tasks, tasksCapped, err := s.taskPage(ctx, dialect.TaskFilter{Process: name})
	if err != nil {
		return "", nil, err
	}
	rows, err := s.explainTasks(ctx, tasks)
	if err != nil {
		return "", nil, err
	}
	tl := BuildTimeline(entries, now)
	return "Process " + name, map[string]any{"P": ps[0], "Timeline": tl, "Tasks": rows, "Window": window,
		"Windows": timelineWindows, "TasksCapped": tasksCapped, "TasksMax": taskPageMax}, nil
}

// taskRow is a task with the reasons it waits (for the first explainInline).
type taskRow struct {
	dialect.TaskInfo
	Reasons []Reason
}

func (s *Server) explainTasks(ctx context.Context, tasks []dialect.TaskInfo) ([]taskRow, error) {
	out := make([]taskRow, len(tasks))
	explained := 0
	for i, t := range tasks {
		out[i].TaskInfo = t
		if t.State == dialect.StateRunning || explained >= explainInline {
			continue
		}
		w, err := s.in.TaskWait(ctx, t.ID, s.cfg.DeadAfter)
		if err != nil {
			continue // it left the queue meanwhile
		}
		out[i].Reasons = Explain(w)
		explained++
	}
	return out, nil
}

func (s *Server) tasks(r *http.Request) (string, any, error) {
	q := r.URL.Query()
	f := dialect.TaskFilter{Process: q.Get("process"), State: q.Get("state")}
	if f.State != "" && !slices.Contains(dialect.TaskStates, f.State) {
		return "", nil, fmt.Errorf("%w: state %q: use one of %s", errBadInput, f.State, strings.Join(dialect.TaskStates, ", "))
	}
	tasks, capped, err := s.taskPage(r.Context(), f)
	if err != nil {
		return "", nil, err
	}
	rows, err := s.explainTasks(r.Context(), tasks)
	if err != nil {
		return "", nil, err
	}
	return "Tasks", map[string]any{"Tasks": rows, "Filter": f, "States": dialect.TaskStates, "Capped": capped,
		"Max": taskPageMax, "Inline": explainInline}, nil
}

// taskPage reads the first taskPageMax tasks of f, and whether there are more.
func (s *Server) taskPage(ctx context.Context, f dialect.TaskFilter) ([]dialect.TaskInfo, bool, error) {
	f.Limit = taskPageMax + 1
	tasks, err := s.d.TaskList(ctx, f)
	if err != nil || len(tasks) <= taskPageMax {
		return tasks, false, err
	}
	return tasks[:taskPageMax], true, nil
}

func (s *Server) task(r *http.Request) (string, any, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return "", nil, fmt.Errorf("%w: task id %q", errBadInput, r.PathValue("id"))
	}
	data := map[string]any{"ID": id}
	w, waitErr := s.in.TaskWait(r.Context(), id, s.cfg.DeadAfter)
	switch {
	case waitErr == nil:
		data["Wait"], data["Reasons"] = w, Explain(w)
	case !isNotFound(waitErr):
		return "", nil, waitErr
	}
	logs, err := s.d.LogList(r.Context(), dialect.LogFilter{TaskID: id, Limit: 200})
	if err != nil {
		return "", nil, err
	}
	// A task that has left the queue is still shown by its Logs rows; one
	// with neither never existed (or its history was pruned).
	if waitErr != nil && len(logs) == 0 {
		return "", nil, fmt.Errorf("task %d: %w", id, dialect.ErrNotFound)
	}
	data["Logs"] = logs
	return fmt.Sprintf("Task %d", id), data, nil
}

func (s *Server) whyJSON(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		http.Error(w, "bad task id", http.StatusBadRequest)
		return
	}
	tw, err := s.in.TaskWait(r.Context(), id, s.cfg.DeadAfter)
	if err != nil {
		status := http.StatusInternalServerError
		if isNotFound(err) {
			status = http.StatusNotFound
		}
		http.Error(w, err.Error(), status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"task": tw.Task, "reasons": Explain(tw)})
}

// logCursor pages Logs (oldest first) without an offset: the start time and id
// of the last row shown, a key in the list's own order (started_at, id), so
// that any number of rows started at one instant (a bulk cancel writes them
// all with one timestamp) page through, each once.
type logCursor struct {
	At time.Time
	ID int64
}

func (c logCursor) String() string {
	return c.At.UTC().Format(time.RFC3339Nano) + "~" + strconv.FormatInt(c.ID, 10)
}

func parseCursor(s string) (logCursor, bool) {
	at, id, ok := strings.Cut(s, "~")
	if !ok {
		return logCursor{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return logCursor{}, false
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n < 0 {
		return logCursor{}, false
	}
	return logCursor{At: t, ID: n}, true
}

func (s *Server) logs(r *http.Request) (string, any, error) {
	q := r.URL.Query()
	f := dialect.LogFilter{Process: q.Get("process"), WorkerID: q.Get("worker"), Outcome: dialect.Outcome(q.Get("outcome"))}
	if f.Outcome != "" && !slices.Contains(dialect.Outcomes, f.Outcome) {
		return "", nil, fmt.Errorf("%w: outcome %q is not one of Logs' outcomes", errBadInput, f.Outcome)
	}
	if v := q.Get("task"); v != "" {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil || id <= 0 {
			return "", nil, fmt.Errorf("%w: task %q must be a positive whole number", errBadInput, v)
		}
		f.TaskID = id
	}
	since := q.Get("since")
	if since == "" {
		since = "24h"
	}
	if since != "all" {
		d, err := time.ParseDuration(since)
		if err != nil || d <= 0 {
			return "", nil, fmt.Errorf("%w: since %q: use a duration like 1h or all", errBadInput, since)
		}
		f.Since = time.Now().Add(-d)
	}
	if v := q.Get("after"); v != "" {
		c, ok := parseCursor(v)
		if !ok {
			return "", nil, fmt.Errorf("%w: bad page cursor", errBadInput)
		}
		if !c.At.Before(f.Since) {
			f.Since, f.AfterID = c.At, c.ID
		}
	}
	f.Limit = logPageSize + 1
	entries, err := s.d.LogList(r.Context(), f)
	if err != nil {
		return "", nil, err
	}
	next := ""
	if len(entries) > logPageSize {
		entries = entries[:logPageSize]
		last := entries[len(entries)-1]
		next = logCursor{At: last.StartedAt, ID: last.ID}.String()
	}
	return "Logs", map[string]any{"Logs": entries, "Q": q, "Since": since, "Next": next, "Outcomes": dialect.Outcomes,
		"Paged": q.Get("after") != ""}, nil
}

type workerRow struct {
	dialect.WorkerStatus
	State string
	Age   time.Duration
}

func (s *Server) workers(r *http.Request) (string, any, error) {
	ws, err := s.op.WorkerList(r.Context())
	if err != nil {
		return "", nil, err
	}
	rows := make([]workerRow, len(ws))
	alive := 0
	for i, w := range ws {
		rows[i] = workerRow{WorkerStatus: w, State: workerState(w, s.cfg.DeadAfter), Age: w.Now.Sub(w.HeartbeatAt)}
		if rows[i].State == "alive" {
			alive++
		}
	}
	return "Workers", map[string]any{"Workers": rows, "Alive": alive, "DeadAfter": s.cfg.DeadAfter}, nil
}

// workerState is alive, dead (no heartbeat within deadAfter) or stopped.
func workerState(w dialect.WorkerStatus, deadAfter time.Duration) string {
	switch {
	case w.StoppedAt != nil:
		return "stopped"
	case w.Now.Sub(w.HeartbeatAt) > deadAfter:
		return "dead"
	}
	return "alive"
}

func (s *Server) limits(r *http.Request) (string, any, error) {
	ls, err := s.op.LimitList(r.Context())
	if err != nil {
		return "", nil, err
	}
	return "Limits", map[string]any{"Limits": ls}, nil
}

func (s *Server) schedules(r *http.Request) (string, any, error) {
	ss, err := s.d.ScheduleList(r.Context(), dialect.ScheduleFilter{})
	if err != nil {
		return "", nil, err
	}
	return "Schedules", map[string]any{"Schedules": ss}, nil
}

func (s *Server) leases(r *http.Request) (string, any, error) {
	ls, err := s.d.LeaseList(r.Context(), dialect.LeaseFilter{})
	if err != nil {
		return "", nil, err
	}
	return "Exclusive leases", map[string]any{"Leases": ls}, nil
}
