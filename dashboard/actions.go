package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/internal/operate"
)

// An action changes the queue through the same calls as queuectl (the
// dialect's Operator, the client's schedule methods). A POST without confirm=1
// shows what would happen and asks; with it, the action runs, is logged, and
// the browser returns to the page it came from with the outcome.
type actionDef struct {
	Title  string // the question: "Retry task %s?"
	Detail string
	run    func(s *Server, r *http.Request, target string, value int) (string, error)
	value  bool // takes a number (limit set)
}

func taskID(target string) (int64, error) {
	id, err := strconv.ParseInt(target, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%w: task id %q must be a positive whole number", errBadInput, target)
	}
	return id, nil
}

// onTask and onProcess run a retry, discard or cancel, whose target is a task
// id or a process name; operate holds the calls and messages queuectl shares.
func onTask(a operate.Action) func(*Server, *http.Request, string, int) (string, error) {
	return func(s *Server, r *http.Request, t string, _ int) (string, error) {
		id, err := taskID(t)
		if err != nil {
			return "", err
		}
		return a.OnTask(r.Context(), s.op, id)
	}
}

func onProcess(a operate.Action) func(*Server, *http.Request, string, int) (string, error) {
	return func(s *Server, r *http.Request, t string, _ int) (string, error) {
		return a.OnProcess(r.Context(), s.op, t)
	}
}

var actions = map[string]actionDef{
	"task-retry": {Title: "Retry task %s?", Detail: "It runs again with fresh attempts (only a task that failed for good).",
		run: onTask(operate.Retry)},
	"task-discard": {Title: "Discard task %s?", Detail: "It counts as finished: later stages of its process may run.",
		run: onTask(operate.Discard)},
	"task-cancel": {Title: "Cancel task %s?", Detail: "It leaves the queue without running (a running task is refused).",
		run: onTask(operate.Cancel)},
	"process-retry": {Title: "Retry every failed task of process %s?", Detail: "They run again with fresh attempts.",
		run: onProcess(operate.Retry)},
	"process-discard": {Title: "Discard every failed task of process %s?", Detail: "Later stages may run.",
		run: onProcess(operate.Discard)},
	"process-cancel": {Title: "Cancel every waiting task of process %s?", Detail: "Running tasks finish their attempt.",
		run: onProcess(operate.Cancel)},
	"process-pause": {Title: "Pause process %s?", Detail: "No new task of it starts; running ones finish.",
		run: func(s *Server, r *http.Request, t string, _ int) (string, error) {
			return operate.SetPaused(r.Context(), s.op, t, true)
		}},
	"process-resume": {Title: "Resume process %s?", Detail: "Workers claim its tasks again.",
		run: func(s *Server, r *http.Request, t string, _ int) (string, error) {
			return operate.SetPaused(r.Context(), s.op, t, false)
		}},
	"limit-set": {Title: "Set limit %s?", Detail: "It takes effect at the next claim; running tasks above it finish.", value: true,
		run: func(s *Server, r *http.Request, t string, v int) (string, error) {
			if err := dialect.ValidateLimit(t, v); err != nil {
				return "", err
			}
			return fmt.Sprintf("limit %q set to %d", t, v), s.op.LimitSet(r.Context(), t, v)
		}},
	"schedule-pause": {Title: "Pause schedule %s?", Detail: "Ticks passing meanwhile are missed ticks.",
		run: func(s *Server, r *http.Request, t string, _ int) (string, error) {
			return fmt.Sprintf("schedule %s paused", t), s.c.SchedulePause(r.Context(), t)
		}},
	"schedule-resume": {Title: "Resume schedule %s?", Detail: "It fires again from its next tick.",
		run: func(s *Server, r *http.Request, t string, _ int) (string, error) {
			return fmt.Sprintf("schedule %s resumed", t), s.c.ScheduleResume(r.Context(), t)
		}},
	"schedule-run-now": {Title: "Run schedule %s now?", Detail: "One run is enqueued now; its next tick stays as it is.",
		run: func(s *Server, r *http.Request, t string, _ int) (string, error) {
			res, err := s.c.ScheduleRunNow(r.Context(), t, s.cfg.Actor)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("enqueued %d task(s) to process %s", len(res.TaskIDs), res.Process), nil
		}},
}

func (s *Server) action(w http.ResponseWriter, r *http.Request) {
	if s.cfg.ReadOnly {
		http.Error(w, "the dashboard is read-only (--read-only)", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := s.checkCSRF(r); err != nil {
		http.Error(w, "forbidden: "+err.Error(), http.StatusForbidden)
		return
	}
	name := r.PathValue("action")
	def, ok := actions[name]
	if !ok {
		http.Error(w, "unknown action", http.StatusNotFound)
		return
	}
	target := strings.TrimSpace(r.PostFormValue("target"))
	if target == "" {
		s.fail(w, r, fmt.Errorf("%w: %s needs a target", errBadInput, name))
		return
	}
	value := 0
	if def.value {
		v, err := strconv.Atoi(strings.TrimSpace(r.PostFormValue("value")))
		if err != nil {
			s.fail(w, r, fmt.Errorf("%w: %q: the maximum must be a whole number >= 0", errBadInput, r.PostFormValue("value")))
			return
		}
		value = v
	}
	back := backURL(r)
	if r.PostFormValue("confirm") != "1" {
		title := fmt.Sprintf(def.Title, target)
		if def.value {
			title = fmt.Sprintf("Set limit %s to %d?", target, value)
		}
		v := view{Title: "Confirm", CSRF: r.PostFormValue("csrf"), ReadOnly: false, Path: back,
			Data: map[string]any{"Question": title, "Detail": def.Detail, "Action": name, "Target": target,
				"Value": r.PostFormValue("value"), "HasValue": def.value, "Back": back}}
		s.render(w, r, "confirm", v, http.StatusOK)
		return
	}
	// Logs records who did it (operator actions write a row per task changed).
	actor := s.cfg.Actor
	if user, _, ok := r.BasicAuth(); ok && user != "" && s.cfg.Access.Required() {
		actor = user + " via " + actor
	}
	r = r.WithContext(dialect.WithActor(r.Context(), actor))
	msg, err := def.run(s, r, target, value)
	ev := s.cfg.Logger.Info()
	if err != nil {
		ev = s.cfg.Logger.Warn().Str("error", err.Error())
	}
	ev.Str("action", name).Str("target", target).Str("actor", actor).Str("remote", r.RemoteAddr).Msg("dashboard action")
	if err != nil {
		if errors.Is(err, dialect.ErrNotFound) || errors.Is(err, dialect.ErrWrongState) || errors.Is(err, dialect.ErrInvalid) {
			s.fail(w, r, err)
			return
		}
		s.fail(w, r, fmt.Errorf("%s %s: %w", name, target, err))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: "stageq_flash", Value: url.QueryEscape(msg), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, MaxAge: 60})
	http.Redirect(w, r, back, http.StatusSeeOther)
}

func isNotFound(err error) bool { return errors.Is(err, dialect.ErrNotFound) }
