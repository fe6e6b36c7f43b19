package dashboard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/internal/queuetest"
	"github.com/stageq/stageq/stages"
)

// TestLongValuesFitTheWindow: a process name and a body without a space to
// break at wrap inside their cells. Before, a body of 60 unbroken characters
// (the list clips it there) widened the tasks and logs tables past a 1400px
// window: the page scrolled sideways, the header ended short, and "why it
// waits" was squeezed into a column of a few words.
func TestLongValuesFitTheWindow(t *testing.T) {
	chromiumPath(t)
	dir := screenshotDir(t)
	eachDatabase(t, func(t *testing.T, dsn string) {
		ctx := context.Background()
		c := queuetest.Client(t, dsn)
		op, _ := dialect.AsOperator(c.Dialect())
		name := "nightly-" + strings.Repeat("x", 150)
		body := "SELECT '" + strings.Repeat("a", 200) + "'"
		ord := 100
		res, err := c.Submit(ctx, stages.Plan{Process: name, Stages: []stages.Stage{{Order: &ord, Tasks: []stages.Task{
			{Body: body, RunAt: time.Now().Add(time.Hour)}, {Body: body, RunAt: time.Now().Add(time.Hour)}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := op.TaskCancel(ctx, res.TaskIDs[1]); err != nil { // a Logs row with the body
			t.Fatal(err)
		}
		base, _ := serve(t, dsn, "--addr", "127.0.0.1:0")
		b := newBrowser(t)
		for _, page := range []struct{ path, table string }{{"/tasks", "table.tasks"}, {"/logs?since=all", "table.logs"}} {
			run(t, b, "open "+page.path, chromedp.Navigate(base+page.path), chromedp.WaitVisible(chromedp.CSS(page.table+" tbody tr[data-task], "+page.table+" tbody tr[data-log]")))
			over := get(t, b, "page width", chromedp.Evaluate[[]int](`[document.documentElement.scrollWidth, window.innerWidth]`))
			if over[0] > over[1] {
				t.Errorf("%s is %dpx wide in a %dpx window: a long body or process name widens it", page.path, over[0], over[1])
				shot(t, b, dir, strings.ReplaceAll(t.Name(), "/", "-")+"-wide.png")
			}
		}
	})
}

// TestLiveMarkSaysWhenUpdatesPause: once a form of the page is edited, live
// updates stop (a half-typed value is never replaced), and the header's mark
// says "paused" instead of "live". Before, it kept reading "live" over content
// that no longer changed: limits in use, heartbeats, states frozen.
func TestLiveMarkSaysWhenUpdatesPause(t *testing.T) {
	chromiumPath(t)
	eachDatabase(t, func(t *testing.T, dsn string) {
		c := queuetest.Client(t, dsn)
		op, _ := dialect.AsOperator(c.Dialect())
		if err := op.LimitSet(context.Background(), "erp-api", 3); err != nil {
			t.Fatal(err)
		}
		base, _ := serve(t, dsn, "--addr", "127.0.0.1:0", "--refresh", "200ms")
		b := newBrowser(t)
		run(t, b, "open limits", chromedp.Navigate(base+"/limits"), chromedp.WaitVisible(chromedp.CSS(`tr[data-limit="erp-api"]`)))
		if got := text(t, b, "#live"); !strings.Contains(got, "live") {
			t.Fatalf("before any edit the mark reads %q, want live", got)
		}
		click(t, b, `tr[data-limit="erp-api"] input[name="value"]`)
		run(t, b, "type a new maximum", chromedp.SendKeys(chromedp.CSS(`tr[data-limit="erp-api"] input[name="value"]`), "5"))
		// The user looks elsewhere without submitting: the field loses focus.
		get(t, b, "blur", chromedp.Evaluate[bool](`(document.activeElement.blur(), true)`))
		before := get(t, b, "read updates", chromedp.Evaluate[int](`+document.body.dataset.updates`))
		if err := op.LimitSet(context.Background(), "erp-api", 7); err != nil { // a change the page would show
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		after := get(t, b, "read updates", chromedp.Evaluate[int](`+document.body.dataset.updates`))
		if after != before {
			t.Errorf("the page was updated after its form was edited (updates %d -> %d)", before, after)
		}
		mark := text(t, b, "#live")
		class := get(t, b, "mark class", chromedp.Evaluate[string](`document.getElementById('live').className`))
		if !strings.Contains(mark, "paused") || !strings.Contains(class, "paused") {
			t.Errorf("updates stopped, but the mark reads %q (class %q), want paused", mark, class)
		}
	})
}
