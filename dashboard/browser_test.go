package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/internal/queuetest"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// The browser tests drive a headless Chromium (Debian's chromium package) over
// the DevTools protocol against `queuectl serve` on real databases. Under CI
// (CI=true) a missing browser fails the test; elsewhere it is skipped with a
// message. Screenshots go to $STAGEQ_SCREENSHOTS, or a temporary directory
// named in the log.

func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true but no chromium on PATH: the browser tests cannot run (apt-get install -y chromium; .ci/run does)")
	}
	t.Skip("no chromium on PATH: browser tests skipped (apt-get install -y chromium to run them)")
	return ""
}

func screenshotDir(t *testing.T) string {
	dir := os.Getenv("STAGEQ_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, // root in containers and CI
		chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// run runs browser steps with a bound on each call.
func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// get runs one browser action that returns a value.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	var err error
	// Live updates replace the page's content every few hundred milliseconds;
	// a read that lost its node to a swap is tried again.
	for range 3 {
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		var v T
		v, err = chromedp.Run(c, a)
		cancel()
		if err == nil {
			return v
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: %v", what, err)
	var zero T
	return zero
}

// click clicks the element sel selects, trying again when a live update
// replaced it between the lookup and the click.
func click(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	var err error
	for range 5 {
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = chromedp.Do(c, chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)))
		cancel()
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("click %s: %v", sel, err)
}

// count is how many elements match a CSS selector.
func count(t *testing.T, ctx context.Context, sel string) int {
	t.Helper()
	return get(t, ctx, "count "+sel, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
}

func shot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png := get(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", p)
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	run(t, ctx, "wait for "+sel, chromedp.WaitReady(chromedp.CSS(sel)))
	// innerText is what a person reads; SVG elements have only textContent.
	return get(t, ctx, "read "+sel, chromedp.Evaluate[string](fmt.Sprintf(
		"(function(){var e=document.querySelector(%q); return e.innerText === undefined ? e.textContent : e.innerText})()", sel)))
}

func mustContain(t *testing.T, page, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s does not show %q; it shows:\n%s", page, w, got)
		}
	}
}

// confirmAction clicks an action button, checks the confirmation page, and
// confirms; the browser comes back to the page with the outcome.
func confirmAction(t *testing.T, ctx context.Context, button, question string) string {
	t.Helper()
	click(t, ctx, button)
	run(t, ctx, "wait for the confirmation", chromedp.WaitVisible(chromedp.CSS("#confirm-yes")))
	mustContain(t, "the confirmation page", text(t, ctx, "#confirm"), question)
	run(t, ctx, "confirm", chromedp.Click(chromedp.CSS("#confirm-yes")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	return text(t, ctx, "#flash")
}

// workload fills the queue with what every page has something to show for:
// process etl (three stages, one attempt abandoned by a worker that vanished,
// one retried), broken (a task failed for good, a stage blocked behind it),
// capped (waits on a limit at 0), held (paused), a schedule and a lease. A
// worker runs it in-process until the test ends.
func workload(t *testing.T, dsn string) (*queue.Client, string) {
	t.Helper()
	ctx := context.Background()
	c := queuetest.Client(t, dsn)
	d := c.Dialect()
	op, _ := dialect.AsOperator(d)
	ord := func(n int) *int { return &n }
	work := func(ms int) stages.Task { return stages.Task{Kind: "work", Body: fmt.Sprint(ms)} }
	if _, err := c.Submit(ctx, stages.Plan{Process: "etl", Stages: []stages.Stage{
		{Order: ord(100), Tasks: []stages.Task{work(250), work(400), work(300), {Kind: "flaky", Body: "150"}}},
		{Order: ord(200), Tasks: []stages.Task{work(350), work(200), work(500)}},
		{Order: ord(300), Tasks: []stages.Task{work(300)}},
	}}); err != nil {
		t.Fatal(err)
	}
	// A worker that claims one task and vanishes: its attempt is abandoned once
	// the lease expires, and the task runs again on the live worker.
	if err := d.WorkerRegister(ctx, dialect.WorkerInfo{ID: "ghost-1", Hostname: "gone", PID: 1, Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	if got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "ghost-1", Max: 1, Token: 7, Lease: 300 * time.Millisecond}); err != nil || len(got) != 1 {
		t.Fatalf("ghost claim: %v %v", got, err)
	}
	if _, err := c.Submit(ctx, stages.Plan{Process: "broken", Stages: []stages.Stage{
		{Order: ord(10), Tasks: []stages.Task{{Kind: "boom", Body: "row 17"}}},
		{Order: ord(20), Tasks: []stages.Task{work(10)}},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := op.LimitSet(ctx, "erp-api", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, stages.Plan{Process: "capped", Stages: []stages.Stage{
		{Order: ord(1), Limit: "erp-api", Tasks: []stages.Task{work(10)}},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, stages.Plan{Process: "held", Stages: []stages.Stage{{Order: ord(1), Tasks: []stages.Task{work(10)}}}}); err != nil {
		t.Fatal(err)
	}
	if err := op.ProcessSetPaused(ctx, "held", true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ScheduleAdd(ctx, queue.Schedule{Name: "hourly-refresh", Every: stages.Duration(time.Hour),
		Plan: stages.Plan{Process: "refresh", Stages: []stages.Stage{{Order: ord(1), Tasks: []stages.Task{work(10)}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := d.LeaseTryAcquire(ctx, dialect.LeaseAcquireParams{Name: "nightly-export", Holder: "cron@db1", TTL: time.Hour}); err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}

	w, err := queue.NewWorker(c, queue.WorkerConfig{ID: "worker-a", Concurrency: 3, Lease: 5 * time.Second,
		RetryBase: 100 * time.Millisecond, RetryMax: 200 * time.Millisecond, PollMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sleep := func(ctx context.Context, t *queue.Task) error {
		var ms int
		fmt.Sscan(t.Body, &ms)
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	w.Handle("work", sleep)
	w.Handle("flaky", func(ctx context.Context, t *queue.Task) error {
		if t.Attempt == 1 {
			return errors.New("connection reset by peer")
		}
		return sleep(ctx, t)
	})
	w.Handle("boom", func(context.Context, *queue.Task) error {
		return queue.NoRetry(errors.New("boom: bad input in row 17"))
	})
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	waitFor(t, 60*time.Second, "process etl succeeds", func() (bool, error) {
		ps, err := op.ProcessList(ctx, dialect.ProcessFilter{Name: "etl"})
		return err == nil && ps[0].State == dialect.ProcessSucceeded, err
	})
	waitFor(t, 30*time.Second, "process broken fails", func() (bool, error) {
		ps, err := op.ProcessList(ctx, dialect.ProcessFilter{Name: "broken"})
		return err == nil && ps[0].State == dialect.ProcessFailed, err
	})
	return c, w.ID()
}

func TestDashboardInBrowser(t *testing.T) {
	const deadAfter = 5 * time.Second
	chromiumPath(t)
	dir := screenshotDir(t)
	eachDatabase(t, func(t *testing.T, dsn string) {
		name := filepath.Base(filepath.Dir(t.Name() + "/x"))
		ctx := context.Background()
		c, workerID := workload(t, dsn)
		d := c.Dialect()
		op, _ := dialect.AsOperator(d)
		base, stop := serve(t, dsn, "--addr", "127.0.0.1:0", "--refresh", "400ms", "--dead-after", deadAfter.String())
		b := newBrowser(t)

		// Processes: state, scheduling and a bar per stage.
		run(t, b, "open processes", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-process="broken"]`)))
		procs := text(t, b, "#content")
		mustContain(t, "the processes page", procs, "broken", "failed", "capped", "held", "paused", "1 failed")
		if strings.Contains(procs, "etl") {
			t.Errorf("the processes page lists the succeeded process etl without ?all")
		}
		bars := count(t, b, `tr[data-process="broken"] svg.bar`)
		if bars != 2 {
			t.Errorf("process broken has %d stage bars, want 2", bars)
		}
		shot(t, b, dir, name+"-processes.png")

		// Live update: a process submitted now appears without a reload.
		before := get(t, b, "read updates", chromedp.Evaluate[int](`+document.body.dataset.updates`))
		ord := 5
		if _, err := c.Submit(ctx, stages.Plan{Process: "late-arrival", Stages: []stages.Stage{{Order: &ord,
			Tasks: []stages.Task{{Kind: "work", Body: "10", RunAt: time.Now().Add(time.Hour)}}}}}); err != nil {
			t.Fatal(err)
		}
		run(t, b, "live update shows late-arrival", chromedp.WaitVisible(chromedp.CSS(`tr[data-process="late-arrival"]`)))
		after := get(t, b, "read updates", chromedp.Evaluate[int](`+document.body.dataset.updates`))
		if after <= before {
			t.Errorf("the page was not updated in place (updates %d -> %d)", before, after)
		}

		// The process page: the stage timeline from Logs.
		run(t, b, "open etl", chromedp.Navigate(base+"/process/etl?window=all"), chromedp.WaitVisible(chromedp.CSS("#timeline")))
		groups := count(t, b, "#timeline g.stagegroup")
		attempts := count(t, b, "#timeline g.attempt")
		abandoned := count(t, b, `#timeline g.attempt[data-outcome="abandoned"]`)
		retries := count(t, b, "#timeline g.attempt.retry")
		logs, err := d.LogList(ctx, dialect.LogFilter{Process: "etl"})
		if err != nil {
			t.Fatal(err)
		}
		// What the timeline must show is what Logs holds: at least the ghost's
		// abandoned attempt and the flaky task's failure, each followed by a
		// retry, and more if a loaded machine let a live lease lapse too.
		// (A retry is any attempt after a task's first; an abandoned attempt
		// keeps its number, so attempt numbers do not count them.)
		wantAbandoned, firsts := 0, map[int64]bool{}
		for _, l := range logs {
			if l.Outcome == dialect.OutcomeAbandoned {
				wantAbandoned++
			}
			firsts[l.TaskID] = true
		}
		wantRetries := len(logs) - len(firsts)
		if groups != 3 || attempts != len(logs) || abandoned != wantAbandoned || abandoned < 1 || retries != wantRetries || retries < 2 {
			t.Errorf("timeline: %d stage groups (want 3), %d attempts (Logs has %d), %d abandoned (Logs has %d, want at least 1), %d retries (Logs has %d, want at least 2: after the abandoned and the failed attempt)",
				groups, attempts, len(logs), abandoned, wantAbandoned, retries, wantRetries)
		}
		mustContain(t, "the timeline", text(t, b, "#timeline"), "stage 100", "stage 200", "stage 300", "abandoned", "failed, retried", "ghost-1", workerID)
		shot(t, b, dir, name+"-process.png")
		tl := get(t, b, "timeline screenshot", chromedp.Screenshot(chromedp.CSS("#timeline")))
		if err := os.WriteFile(filepath.Join(dir, name+"-timeline.png"), tl, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s", filepath.Join(dir, name+"-timeline.png"))

		// Tasks: why each one waits.
		run(t, b, "open tasks", chromedp.Navigate(base+"/tasks"), chromedp.WaitVisible(chromedp.CSS("table.tasks")))
		tasks := text(t, b, "#content")
		mustContain(t, "the tasks page", tasks,
			"Limit erp-api is 0",         // capped
			"Process held is paused",     // held
			"Stage 10 of process broken", // broken's stage 20
			"failed for good",            // broken's stage 10
			"It may not start before",    // late-arrival's run_at
		)
		shot(t, b, dir, name+"-tasks.png")
		run(t, b, "filter tasks", chromedp.Navigate(base+"/tasks?process=broken&state=failed"), chromedp.WaitVisible(chromedp.CSS("table.tasks")))
		rows := count(t, b, "table.tasks tbody tr[data-task]")
		if rows != 1 {
			t.Errorf("tasks filtered by process broken and state failed: %d rows, want 1", rows)
		}
		blocked, err := d.TaskList(ctx, dialect.TaskFilter{Process: "broken", State: dialect.StateBlocked})
		if err != nil || len(blocked) != 1 {
			t.Fatalf("broken's blocked task: %v %v", blocked, err)
		}
		run(t, b, "open task", chromedp.Navigate(fmt.Sprintf("%s/task/%d", base, blocked[0].ID)), chromedp.WaitVisible(chromedp.CSS("#why")))
		mustContain(t, "the task page", text(t, b, "#why"), "Stage 10 of process broken is not finished", "failed for good and block it")

		// Logs, filtered.
		run(t, b, "open logs", chromedp.Navigate(base+"/logs?since=all&outcome=abandoned"), chromedp.WaitVisible(chromedp.CSS("table.logs")))
		mustContain(t, "the logs page", text(t, b, "table.logs"), "ghost-1", "abandoned", "etl")

		// Workers: the live one and the vanished one. The ghost counts as dead
		// only once its last heartbeat is older than --dead-after, and a fast
		// machine gets here sooner than that.
		waitFor(t, 30*time.Second, "ghost-1's heartbeat older than --dead-after", func() (bool, error) {
			ws, err := op.WorkerList(ctx)
			for _, w := range ws {
				if w.ID == "ghost-1" {
					return w.Now.Sub(w.HeartbeatAt) > deadAfter, err
				}
			}
			return false, err
		})
		run(t, b, "open workers", chromedp.Navigate(base+"/workers"), chromedp.WaitVisible(chromedp.CSS(`tr[data-worker="ghost-1"]`)))
		live := get(t, b, "worker state", chromedp.AttributeValue(chromedp.CSS(fmt.Sprintf(`tr[data-worker=%q]`, workerID)), "data-state")).Value
		ghost := get(t, b, "ghost state", chromedp.AttributeValue(chromedp.CSS(`tr[data-worker="ghost-1"]`), "data-state")).Value
		if live != "alive" || ghost != "dead" {
			t.Errorf("workers page: %s is %q (want alive), ghost-1 is %q (want dead)", workerID, live, ghost)
		}
		shot(t, b, dir, name+"-workers.png")

		// Schedules and leases.
		run(t, b, "open schedules", chromedp.Navigate(base+"/schedules"), chromedp.WaitVisible(chromedp.CSS(`tr[data-schedule="hourly-refresh"]`)))
		mustContain(t, "the schedules page", text(t, b, "table.schedules"), "hourly-refresh", "every 1h0m0s")
		msg := confirmAction(t, b, `button[data-action="schedule-run-now"][data-target="hourly-refresh"]`, "Run schedule hourly-refresh now?")
		mustContain(t, "the run-now outcome", msg, "enqueued 1 task(s) to process refresh")
		runs, err := c.ScheduleRuns(ctx, "hourly-refresh", 10)
		if err != nil || len(runs) != 1 || runs[0].Outcome != dialect.RunManual || !strings.HasPrefix(runs[0].WorkerID, "dashboard@") {
			t.Errorf("schedule runs after run-now: %+v %v", runs, err)
		}
		run(t, b, "open leases", chromedp.Navigate(base+"/leases"), chromedp.WaitVisible(chromedp.CSS(`tr[data-lease="nightly-export"]`)))
		mustContain(t, "the leases page", text(t, b, "table.leases"), "cron@db1", "held")

		// Actions change the queue: raise the limit the capped task waits on.
		run(t, b, "open limits", chromedp.Navigate(base+"/limits"), chromedp.WaitVisible(chromedp.CSS(`tr[data-limit="erp-api"]`)))
		shot(t, b, dir, name+"-limits.png")
		// Typed as a person types (key events): the page stops refreshing the form.
		// Focused, the field is left alone by live updates; typing marks the form edited.
		click(t, b, `tr[data-limit="erp-api"] input[name="value"]`)
		get(t, b, "select the old value", chromedp.Evaluate[bool](`(document.activeElement.select(), document.activeElement.name === "value")`))
		run(t, b, "type the new maximum", chromedp.SendKeys(chromedp.CSS(`tr[data-limit="erp-api"] input[name="value"]`), "2"))
		msg = confirmAction(t, b, `tr[data-limit="erp-api"] button`, "Set limit erp-api to 2?")
		mustContain(t, "the limit outcome", msg, `limit "erp-api" set to 2`)
		if l, err := op.LimitGet(ctx, "erp-api"); err != nil || l.Max != 2 {
			t.Errorf("limit erp-api after the action: %+v %v", l, err)
		}
		waitFor(t, 30*time.Second, "the capped process runs once its limit is raised", func() (bool, error) {
			ps, err := op.ProcessList(ctx, dialect.ProcessFilter{Name: "capped"})
			return err == nil && ps[0].State == dialect.ProcessSucceeded, err
		})
		// Resume the paused process from its page.
		run(t, b, "open held", chromedp.Navigate(base+"/process/held"), chromedp.WaitVisible(chromedp.CSS("h1")))
		msg = confirmAction(t, b, `button[data-action="process-resume"][data-target="held"]`, "Resume process held?")
		mustContain(t, "the resume outcome", msg, `process "held" resumed`)
		waitFor(t, 30*time.Second, "the resumed process runs", func() (bool, error) {
			ps, err := op.ProcessList(ctx, dialect.ProcessFilter{Name: "held"})
			return err == nil && ps[0].State == dialect.ProcessSucceeded, err
		})
		// Discard the failed task: its blocked stage runs.
		run(t, b, "open broken", chromedp.Navigate(base+"/tasks?process=broken"), chromedp.WaitVisible(chromedp.CSS("table.tasks")))
		msg = confirmAction(t, b, `button[data-action="task-discard"]`, "Discard task")
		mustContain(t, "the discard outcome", msg, "discarded")
		failed, err := d.LogList(ctx, dialect.LogFilter{Process: "broken", Outcome: dialect.OutcomeDiscarded})
		if err != nil || len(failed) != 1 || !strings.HasPrefix(failed[0].WorkerID, "dashboard@") {
			t.Errorf("the discard's Logs row: %+v %v (want one, by dashboard@host)", failed, err)
		}
		waitFor(t, 30*time.Second, "broken's later stage runs after the discard", func() (bool, error) {
			ps, err := op.ProcessList(ctx, dialect.ProcessFilter{Name: "broken"})
			return err == nil && ps[0].State == dialect.ProcessSucceeded, err
		})
		run(t, b, "open broken's timeline", chromedp.Navigate(base+"/process/broken?window=all"), chromedp.WaitVisible(chromedp.CSS("#timeline")))
		if n := count(t, b, `#timeline g.attempt[data-outcome="discarded"] path.auditmark`); n != 1 {
			t.Errorf("broken's timeline shows %d discard marks, want 1", n)
		}
		shot(t, b, dir, name+"-process-broken.png")
		// Cancelling the confirmation changes nothing.
		run(t, b, "open processes", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-process="late-arrival"]`)))
		click(t, b, `button[data-action="process-cancel"][data-target="late-arrival"]`)
		run(t, b, "decline", chromedp.WaitVisible(chromedp.CSS("#confirm-no")), chromedp.Click(chromedp.CSS("#confirm-no")),
			chromedp.WaitVisible(chromedp.CSS(`tr[data-process="late-arrival"]`)))
		if ts, err := d.TaskList(ctx, dialect.TaskFilter{Process: "late-arrival"}); err != nil || len(ts) != 1 {
			t.Errorf("late-arrival after a declined cancel: %v %v", ts, err)
		}

		// A POST without the session's CSRF token is refused.
		resp, err := http.PostForm(base+"/action/process-pause", url.Values{"target": {"late-arrival"}, "confirm": {"1"}, "csrf": {"forged"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("forged POST: status %d, want 403", resp.StatusCode)
		}
		if ps, _ := op.ProcessList(ctx, dialect.ProcessFilter{Name: "late-arrival"}); len(ps) == 1 && ps[0].Paused {
			t.Error("a forged POST paused a process")
		}
		if code := stop(); code != 0 {
			t.Errorf("serve exited with %d after SIGTERM-like cancel", code)
		}
	})
}

// TestReadOnlyAndAccess: --read-only shows no action and refuses POSTs; a
// token in the environment is required of every request; a non-loopback
// address without credentials is refused at start.
func TestReadOnlyAndAccess(t *testing.T) {
	dsn := queuetest.Migrated(t, "sqlite://"+filepath.Join(t.TempDir(), "q.db"))
	c := queuetest.Client(t, dsn)
	ord := 1
	if _, err := c.Submit(context.Background(), stages.Plan{Process: "p", Stages: []stages.Stage{{Order: &ord, Tasks: []stages.Task{{Body: "SELECT 1"}}}}}); err != nil {
		t.Fatal(err)
	}
	base, _ := serve(t, dsn, "--addr", "127.0.0.1:0", "--read-only")
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	buf := make([]byte, 1<<16)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	resp.Body.Close()
	if !strings.Contains(sb.String(), `data-process="p"`) || strings.Contains(sb.String(), "/action/") {
		t.Errorf("read-only processes page: want process p and no action form")
	}
	resp, err = http.PostForm(base+"/action/process-pause", url.Values{"target": {"p"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST on a read-only dashboard: status %d, want 403", resp.StatusCode)
	}
	// Without credentials, a page of another site whose name rebinds to
	// 127.0.0.1 (DNS rebinding) is refused: it names its own host.
	port := strings.TrimPrefix(base, "http://127.0.0.1")
	for host, want := range map[string]int{"rebind.evil.example" + port: http.StatusMisdirectedRequest,
		"localhost" + port: http.StatusOK, "[::1]" + port: http.StatusOK, "127.0.0.1" + port: http.StatusOK} {
		req, _ := http.NewRequest("GET", base+"/", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: status %d, want %d", host, resp.StatusCode, want)
		}
	}

	t.Setenv("STAGEQ_DASHBOARD_TOKEN", "s3cret-token")
	base, _ = serve(t, dsn, "--addr", "127.0.0.1:0")
	for _, tc := range []struct {
		name string
		set  func(r *http.Request)
		want int
	}{
		{"none", func(*http.Request) {}, http.StatusUnauthorized},
		{"wrong", func(r *http.Request) { r.SetBasicAuth("x", "nope") }, http.StatusUnauthorized},
		{"basic", func(r *http.Request) { r.SetBasicAuth("ops", "s3cret-token") }, http.StatusOK},
		{"bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret-token") }, http.StatusOK},
	} {
		req, _ := http.NewRequest("GET", base+"/metrics", nil)
		tc.set(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("credentials %s: status %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}

	t.Setenv("STAGEQ_DASHBOARD_TOKEN", "")
	code := serveExit(t, dsn, "--addr", "0.0.0.0:0")
	if code != 2 {
		t.Errorf("serve on 0.0.0.0 without credentials: exit %d, want 2", code)
	}
}
