package dashboard_test

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/stageq/stageq/dashboard"
	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/internal/queuetest"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// The action tests post the forms a page shows, as a browser would (session
// cookie, CSRF token, confirm step, basic authentication), on the dashboard's
// own handler, and read what changed back from the database: the browser test
// needs chromium and exercises only task-discard.

var (
	formRe   = regexp.MustCompile(`(?s)<form method="post" action="/action/([a-z-]+)"[^>]*>(.*?)</form>`)
	hiddenRe = regexp.MustCompile(`<input type="hidden" name="([a-z]+)" value="([^"]*)">`)
	flashRe  = regexp.MustCompile(`<div class="flash" id="flash">([^<]*)</div>`)
	errorRe  = regexp.MustCompile(`(?s)<div class="error" id="error"><h1>(\d+)</h1><p>([^<]*)</p>`)
)

const (
	actionUser, actionPassword = "alice", "s3cret"
	actionActor                = "alice via dashboard-test" // who Logs names for a signed-in user
)

// browser is one signed-in browser session on a dashboard.
type browser struct {
	base   string
	hc     *http.Client
	header map[string]string // sent with every request (an Origin, say)
}

// newActionServer serves a dashboard on dsn with actionUser's credentials;
// set changes its configuration first.
func newActionServer(t *testing.T, dsn string, set ...func(*dashboard.Config)) (*browser, *queue.Client) {
	t.Helper()
	c := queuetest.Client(t, dsn)
	cfg := dashboard.Config{Actor: "dashboard-test", Logger: zerolog.Nop(),
		Access: dashboard.Access{User: actionUser, Password: actionPassword}}
	for _, f := range set {
		f(&cfg)
	}
	srv, err := dashboard.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &browser{base: ts.URL, hc: hc}, c
}

func (b *browser) do(t *testing.T, method, path string, form url.Values) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.SetBasicAuth(actionUser, actionPassword)
	for k, v := range b.header {
		req.Header.Set(k, v)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	return resp, string(text)
}

// get reads a page, which must answer 200.
func (b *browser) get(t *testing.T, path string) string {
	t.Helper()
	resp, page := b.do(t, http.MethodGet, path, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", path, resp.Status, page)
	}
	return page
}

// form is the fields of the page's form for action on target.
func (b *browser) form(t *testing.T, page, action, target string) url.Values {
	t.Helper()
	for _, m := range formRe.FindAllStringSubmatch(page, -1) {
		if m[1] != action {
			continue
		}
		f := url.Values{}
		for _, in := range hiddenRe.FindAllStringSubmatch(m[2], -1) {
			f.Set(in[1], html.UnescapeString(in[2]))
		}
		if f.Get("target") == target {
			return f
		}
	}
	t.Fatalf("the page has no %s form for %q", action, target)
	return nil
}

// act presses the page's button for action on target, answers yes to the
// question (which must contain question) and returns the flash message of the
// page the browser is sent back to.
func (b *browser) act(t *testing.T, pagePath, action, target, question string) string {
	t.Helper()
	resp, confirm := b.do(t, http.MethodPost, "/action/"+action, b.form(t, b.get(t, pagePath), action, target))
	if resp.StatusCode != http.StatusOK || !strings.Contains(html.UnescapeString(confirm), question) {
		t.Fatalf("%s %s: %s, want a page asking %q:\n%s", action, target, resp.Status, question, confirm)
	}
	yes := b.form(t, confirm, action, target)
	if yes.Get("confirm") != "1" || yes.Get("return") != pagePath {
		t.Fatalf("%s %s: the confirm form posts %v", action, target, yes)
	}
	resp, body := b.do(t, http.MethodPost, "/action/"+action, yes)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != pagePath {
		t.Fatalf("%s %s: %s to %q, want 303 to %s:\n%s", action, target, resp.Status, resp.Header.Get("Location"), pagePath, body)
	}
	m := flashRe.FindStringSubmatch(b.get(t, pagePath))
	if m == nil {
		t.Fatalf("%s %s: the page returned to shows no flash message", action, target)
	}
	return html.UnescapeString(m[1])
}

// TestTaskActions retries, discards and cancels one task each through the
// dashboard's forms: each changes the task as its action must, says so, and
// leaves its own Logs row in the signed-in user's name. Swapping two of the
// actions' calls fails each case (a retry would remove the task, a discard
// would log a cancel, a cancel of a waiting task would be refused).
func TestTaskActions(t *testing.T) {
	eachDatabase(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		b, c := newActionServer(t, dsn)
		d := c.Dialect()
		one, two := 1, 2
		submit := func(t *testing.T, p stages.Plan) []int64 {
			t.Helper()
			res, err := c.Submit(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			return res.TaskIDs
		}
		// failForGood fails the one available task of kind for good (no retry
		// scheduled), as a worker does on the last attempt.
		failForGood := func(t *testing.T, kind string) {
			t.Helper()
			got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w1", Max: 10, Token: 7, Lease: time.Minute, Kinds: []string{kind}})
			if err != nil || len(got) != 1 {
				t.Fatalf("claim %s: %+v %v", kind, got, err)
			}
			if err := d.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: got[0].ID, Token: 7, ProcessID: got[0].ProcessID,
				Outcome: dialect.OutcomeFailed, Error: "boom"}); err != nil {
				t.Fatal(err)
			}
		}
		task := func(t *testing.T, process string, id int64) (dialect.TaskInfo, bool) {
			t.Helper()
			ts, err := d.TaskList(ctx, dialect.TaskFilter{Process: process})
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range ts {
				if x.ID == id {
					return x, true
				}
			}
			return dialect.TaskInfo{}, false
		}
		audited := func(t *testing.T, process string, id int64, o dialect.Outcome) {
			t.Helper()
			rows, err := d.LogList(ctx, dialect.LogFilter{Process: process, TaskID: id, Outcome: o})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 1 || rows[0].WorkerID != actionActor {
				t.Errorf("task %d: Logs rows with outcome %s: %+v, want one by %q", id, o, rows, actionActor)
			}
		}
		// press runs action on task id from its page; question and done are
		// formats of the id: what the confirm page asks, what the flash says.
		press := func(t *testing.T, action string, id int64, question, done string) {
			t.Helper()
			target := strconv.FormatInt(id, 10)
			if msg := b.act(t, "/task/"+target, action, target, fmt.Sprintf(question, id)); msg != fmt.Sprintf(done, id) {
				t.Errorf("%s: flash %q, want %q", action, msg, fmt.Sprintf(done, id))
			}
		}
		// removed asserts task id left the queue with a Logs row of outcome o.
		removed := func(t *testing.T, process string, id int64, o dialect.Outcome) {
			t.Helper()
			if x, ok := task(t, process, id); ok {
				t.Errorf("after the %s the task is still queued: %+v", o, x)
			}
			audited(t, process, id, o)
		}
		processState := func(t *testing.T, name string) string {
			t.Helper()
			p, err := d.ProcessGet(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			return p.State
		}

		t.Run("retry", func(t *testing.T) {
			ids := submit(t, stages.Plan{Process: "re", Stages: []stages.Stage{{Order: &one,
				Tasks: []stages.Task{{Kind: "re", Body: "SELECT 1", MaxAttempts: 3}}}}})
			failForGood(t, "re")
			if x, _ := task(t, "re", ids[0]); x.State != dialect.StateFailed || x.Attempt != 1 {
				t.Fatalf("before: %+v, want failed on attempt 1", x)
			}
			press(t, "task-retry", ids[0], "Retry task %d?", "task %d will run again")
			x, ok := task(t, "re", ids[0])
			if !ok || x.State != dialect.StateAvailable || x.Attempt != 0 || x.MaxAttempts != 3 {
				t.Errorf("after retry: %+v (in queue %v), want available with attempt 0 of 3", x, ok)
			}
			audited(t, "re", ids[0], dialect.OutcomeRetried)
			if s := processState(t, "re"); s != dialect.ProcessActive {
				t.Errorf("process re is %s after the retry, want %s", s, dialect.ProcessActive)
			}
		})

		t.Run("discard", func(t *testing.T) {
			ids := submit(t, stages.Plan{Process: "di", Stages: []stages.Stage{
				{Order: &one, Tasks: []stages.Task{{Kind: "di", Body: "SELECT 1"}}},
				{Order: &two, Tasks: []stages.Task{{Kind: "di-next", Body: "SELECT 2"}}}}})
			failForGood(t, "di")
			if x, _ := task(t, "di", ids[1]); x.State != dialect.StateBlocked {
				t.Fatalf("before: the later stage's task is %q, want blocked", x.State)
			}
			press(t, "task-discard", ids[0], "Discard task %d?", "task %d discarded")
			removed(t, "di", ids[0], dialect.OutcomeDiscarded)
			if x, _ := task(t, "di", ids[1]); x.State != dialect.StateAvailable {
				t.Errorf("after discard the later stage's task is %q, want available", x.State)
			}
		})

		t.Run("cancel", func(t *testing.T) {
			ids := submit(t, stages.Plan{Process: "ca", Stages: []stages.Stage{{Order: &one,
				Tasks: []stages.Task{{Kind: "ca", Body: "SELECT 1"}}}}})
			if x, _ := task(t, "ca", ids[0]); x.State != dialect.StateAvailable {
				t.Fatalf("before: %+v, want available", x)
			}
			press(t, "task-cancel", ids[0], "Cancel task %d?", "task %d cancelled")
			removed(t, "ca", ids[0], dialect.OutcomeCancelled)
			if s := processState(t, "ca"); s != dialect.ProcessCancelled {
				t.Errorf("process ca is %s after its only task was cancelled, want %s", s, dialect.ProcessCancelled)
			}
		})

		t.Run("unknown task", func(t *testing.T) {
			// The page of a task that neither waits nor has run is not
			// found; the ones above (gone, with Logs rows) were shown.
			if resp, body := b.do(t, http.MethodGet, "/task/999999", nil); resp.StatusCode != http.StatusNotFound {
				t.Errorf("GET /task/999999: %s, want 404\n%.300s", resp.Status, body)
			}
			page := b.get(t, "/tasks")
			csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`).FindStringSubmatch(page)
			if csrf == nil {
				t.Fatal("the tasks page carries no CSRF token")
			}
			f := url.Values{"csrf": {csrf[1]}, "target": {"999999"}, "return": {"/tasks"}, "confirm": {"1"}}
			for _, action := range []string{"task-retry", "task-discard", "task-cancel"} {
				resp, body := b.do(t, http.MethodPost, "/action/"+action, f)
				m := errorRe.FindStringSubmatch(body)
				if resp.StatusCode != http.StatusNotFound || m == nil || m[1] != "404" || !strings.Contains(m[2], "task 999999: not found") {
					t.Errorf("%s of an unknown task: %s, error %q, want 404 naming task 999999 not found", action, resp.Status, m)
				}
				for _, ck := range resp.Cookies() {
					if ck.Name == "stageq_flash" {
						t.Errorf("%s of an unknown task set a flash message %q", action, ck.Value)
					}
				}
			}
			f.Del("csrf")
			if resp, _ := b.do(t, http.MethodPost, "/action/task-cancel", f); resp.StatusCode != http.StatusForbidden {
				t.Errorf("an action without its CSRF token: %s, want 403", resp.Status)
			}
		})
	})
}

// TestProcessActions runs each process action through the process page's
// forms and reads the process back: retry and discard act on its failed tasks
// alone, cancel on its waiting ones (a running task finishes), pause and
// resume flip its paused flag.
func TestProcessActions(t *testing.T) {
	eachDatabase(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		b, c := newActionServer(t, dsn)
		d := c.Dialect()
		op, err := dialect.AsOperator(d)
		if err != nil {
			t.Fatal(err)
		}
		one := 1
		// failed submits n tasks of kind name to process name and fails them for good.
		failed := func(t *testing.T, name string, n int) {
			t.Helper()
			tasks := make([]stages.Task, n)
			for i := range tasks {
				tasks[i] = stages.Task{Kind: name, Body: "SELECT " + strconv.Itoa(i)}
			}
			if _, err := c.Submit(ctx, stages.Plan{Process: name, Stages: []stages.Stage{{Order: &one, Tasks: tasks}}}); err != nil {
				t.Fatal(err)
			}
			got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w1", Max: 10, Token: 9, Lease: time.Minute, Kinds: []string{name}})
			if err != nil || len(got) != n {
				t.Fatalf("claim %s: %+v %v", name, got, err)
			}
			for _, g := range got {
				if err := d.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: g.ID, Token: 9, ProcessID: g.ProcessID,
					Outcome: dialect.OutcomeFailed, Error: "boom"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		status := func(t *testing.T, name string) dialect.ProcessStatus {
			t.Helper()
			ps, err := op.ProcessList(ctx, dialect.ProcessFilter{Name: name, All: true})
			if err != nil || len(ps) != 1 {
				t.Fatalf("process %s: %+v %v", name, ps, err)
			}
			return ps[0]
		}
		states := func(t *testing.T, name string) map[string]int {
			t.Helper()
			ts, err := d.TaskList(ctx, dialect.TaskFilter{Process: name})
			if err != nil {
				t.Fatal(err)
			}
			n := map[string]int{}
			for _, x := range ts {
				n[x.State]++
			}
			return n
		}
		audits := func(t *testing.T, name string, o dialect.Outcome) int {
			t.Helper()
			rows, err := d.LogList(ctx, dialect.LogFilter{Process: name, Outcome: o})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if r.WorkerID != actionActor {
					t.Errorf("process %s: a %s row by %q, want %q", name, o, r.WorkerID, actionActor)
				}
			}
			return len(rows)
		}
		flash := func(t *testing.T, name, action, question, want string) {
			t.Helper()
			if msg := b.act(t, "/process/"+name, action, name, question); msg != want {
				t.Errorf("%s %s: flash %q, want %q", action, name, msg, want)
			}
		}

		t.Run("retry", func(t *testing.T) {
			failed(t, "pr", 2)
			if s := status(t, "pr").State; s != dialect.ProcessFailed {
				t.Fatalf("before: process pr is %s, want failed", s)
			}
			flash(t, "pr", "process-retry", `Retry every failed task of process pr?`, `2 failed task(s) of process "pr" will run again`)
			if n := states(t, "pr"); n[dialect.StateAvailable] != 2 || len(n) != 1 {
				t.Errorf("after retry the tasks are %v, want 2 available", n)
			}
			if n := audits(t, "pr", dialect.OutcomeRetried); n != 2 {
				t.Errorf("%d retried rows in Logs, want 2", n)
			}
			if s := status(t, "pr").State; s != dialect.ProcessActive {
				t.Errorf("after retry process pr is %s, want active", s)
			}
		})

		t.Run("discard", func(t *testing.T) {
			failed(t, "pd", 2)
			flash(t, "pd", "process-discard", `Discard every failed task of process pd?`, `2 failed task(s) of process "pd" discarded`)
			if n := states(t, "pd"); len(n) != 0 {
				t.Errorf("after discard the process still has tasks %v", n)
			}
			if n, m := audits(t, "pd", dialect.OutcomeDiscarded), audits(t, "pd", dialect.OutcomeCancelled); n != 2 || m != 0 {
				t.Errorf("%d discarded and %d cancelled rows in Logs, want 2 and 0", n, m)
			}
			if s := status(t, "pd").State; s != dialect.ProcessCancelled {
				t.Errorf("after discard process pd is %s, want cancelled", s)
			}
		})

		t.Run("cancel", func(t *testing.T) {
			tasks := []stages.Task{{Kind: "pc-run", Body: "SELECT 1"}, {Kind: "pc", Body: "SELECT 2"}, {Kind: "pc", Body: "SELECT 3"}}
			if _, err := c.Submit(ctx, stages.Plan{Process: "pc", Stages: []stages.Stage{{Order: &one, Tasks: tasks}}}); err != nil {
				t.Fatal(err)
			}
			if got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w1", Max: 1, Token: 11, Lease: time.Minute, Kinds: []string{"pc-run"}}); err != nil || len(got) != 1 {
				t.Fatalf("claim: %+v %v", got, err)
			}
			flash(t, "pc", "process-cancel", `Cancel every waiting task of process pc?`,
				`2 task(s) of process "pc" cancelled; 1 still running will finish their attempt`)
			if n := states(t, "pc"); n[dialect.StateRunning] != 1 || len(n) != 1 {
				t.Errorf("after cancel the tasks are %v, want the running one alone", n)
			}
			if n := audits(t, "pc", dialect.OutcomeCancelled); n != 2 {
				t.Errorf("%d cancelled rows in Logs, want 2", n)
			}
		})

		t.Run("pause and resume", func(t *testing.T) {
			failed(t, "pp", 1)
			if status(t, "pp").Paused {
				t.Fatal("before: process pp is paused")
			}
			flash(t, "pp", "process-pause", `Pause process pp?`, `process "pp" paused`)
			if !status(t, "pp").Paused {
				t.Error("after pause process pp is not paused")
			}
			flash(t, "pp", "process-resume", `Resume process pp?`, `process "pp" resumed`)
			if status(t, "pp").Paused {
				t.Error("after resume process pp is still paused")
			}
		})
	})
}

// TestActionsBehindAProxy: behind a proxy that rewrites Host, the browser's
// Origin names the proxy's public address, not the host the dashboard sees.
// Such an action is refused, saying which --origin would admit it; with that
// origin configured it is taken, and any other origin is still refused.
func TestActionsBehindAProxy(t *testing.T) {
	eachDatabase(t, func(t *testing.T, dsn string) {
		const public = "https://dash.example.com"
		pause := func(b *browser, origin string) (*http.Response, string) {
			f := b.form(t, b.get(t, "/process/px"), "process-pause", "px")
			f.Set("confirm", "1")
			b.header = map[string]string{"Origin": origin}
			defer func() { b.header = nil }()
			return b.do(t, http.MethodPost, "/action/process-pause", f)
		}
		plain, c := newActionServer(t, dsn)
		one := 1
		if _, err := c.Submit(context.Background(), stages.Plan{Process: "px", Stages: []stages.Stage{{Order: &one,
			Tasks: []stages.Task{{Body: "SELECT 1", RunAt: time.Now().Add(time.Hour)}}}}}); err != nil {
			t.Fatal(err)
		}
		if resp, body := pause(plain, public); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "its origin is "+public) ||
			!strings.Contains(body, "start the dashboard with --origin") {
			t.Errorf("an action from the proxy's origin, none configured: %s %q; want 403 naming --origin", resp.Status, body)
		}

		configured, err := url.Parse("HTTPS://Dash.Example.com:443/")
		if err != nil {
			t.Fatal(err)
		}
		proxied, _ := newActionServer(t, dsn, func(cfg *dashboard.Config) { cfg.Origins = []string{dashboard.NormalOrigin(configured)} })
		if resp, body := pause(proxied, "https://evil.example"); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "its origin is https://evil.example") {
			t.Errorf("an action from another origin: %s %q; want 403", resp.Status, body)
		}
		paused := func() bool {
			op, err := dialect.AsOperator(c.Dialect())
			if err != nil {
				t.Fatal(err)
			}
			ps, err := op.ProcessList(context.Background(), dialect.ProcessFilter{Name: "px", All: true})
			if err != nil || len(ps) != 1 {
				t.Fatalf("process px: %+v %v", ps, err)
			}
			return ps[0].Paused
		}
		if paused() {
			t.Fatal("a refused action paused px")
		}
		// As browsers write it: the configured origin is normalised alike.
		if resp, body := pause(proxied, "https://dash.example.com"); resp.StatusCode != http.StatusSeeOther {
			t.Errorf("an action from the configured origin: %s %q; want 303", resp.Status, body)
		}
		if !paused() {
			t.Error("the action from the configured origin did not pause px")
		}
	})
}

// TestNormalOrigin: an origin is compared as browsers send it: scheme and
// host in lower case, without the scheme's default port.
func TestNormalOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"HTTPS://Dash.Example.com:443/": "https://dash.example.com",
		"http://dash.example.com:80":    "http://dash.example.com",
		"http://dash.example.com:8080":  "http://dash.example.com:8080",
		"https://[::1]:443":             "https://[::1]",
		"https://[::1]:8443":            "https://[::1]:8443",
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := dashboard.NormalOrigin(u); got != want {
			t.Errorf("NormalOrigin(%s) = %s, want %s", in, got, want)
		}
	}
}
