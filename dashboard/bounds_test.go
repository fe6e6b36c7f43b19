package dashboard_test

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// TestPagesFailWhenTheDatabaseDoesNotAnswer: while another session holds
// Processes locked (a migration, a DBA's transaction left open), a page fails
// with 504 once --request-timeout has passed, naming the bound, instead of
// holding the browser's request open for as long as the lock lasts.
func TestPagesFailWhenTheDatabaseDoesNotAnswer(t *testing.T) {
	eachQueue(t, func(t *testing.T, dsn string, c *queue.Client) {
		if !strings.HasPrefix(dsn, "postgres") {
			t.Skip("SQLite's readers are never blocked by a writer (WAL)")
		}
		ctx := context.Background()
		tx, err := c.Dialect().DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "LOCK TABLE stageq.processes IN ACCESS EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
		base, _ := serve(t, dsn, "--addr", "127.0.0.1:0", "--request-timeout", "1s")
		client := &http.Client{Timeout: time.Minute}
		resp, err := client.Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(b), "did not answer within 1s") {
			t.Errorf("page under a held lock: %s, %q; want 504 naming the bound", resp.Status, b)
		}
	})
}

// TestProcessesPageIsBounded: with more processes than the list shows, the
// processes page shows the first ones by name and says that it stopped. Its
// header names the database.
func TestProcessesPageIsBounded(t *testing.T) {
	eachQueue(t, func(t *testing.T, dsn string, c *queue.Client) {
		ctx := context.Background()
		one := 1
		for i := range 501 {
			plan := stages.Plan{Process: fmt.Sprintf("p%03d", i), Stages: []stages.Stage{{Order: &one,
				Tasks: []stages.Task{{Body: "SELECT 1", RunAt: time.Now().Add(time.Hour)}}}}}
			if _, err := c.Submit(ctx, plan); err != nil {
				t.Fatal(err)
			}
		}
		base, _ := serve(t, dsn, "--addr", "127.0.0.1:0")
		resp, err := http.Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page := string(b)
		if n := strings.Count(page, `data-process="`); n != 500 || !strings.Contains(page, `data-process="p499"`) ||
			strings.Contains(page, `data-process="p500"`) || !strings.Contains(page, `id="capped"`) {
			t.Errorf("processes page: %s, %d processes, capped note %v; want p000 to p499 and the note",
				resp.Status, n, strings.Contains(page, `id="capped"`))
		}
		// Every page's header names the queue it shows.
		if want := `id="database" title="the queue database">` + html.EscapeString(c.Dialect().Where()) + "<"; !strings.Contains(page, want) {
			t.Errorf("processes page: no header naming the database (%s)", want)
		}
	})
}

// TestProcessPageShowsTheLatestAttempts: a process whose window holds more
// attempts than the timeline draws (400) shows the latest ones, a long
// process's live end, and says so; one with more tasks in the queue than the
// page lists (500) says that too, as the tasks page does. At exactly the
// bound nothing is left out, and neither says so.
func TestProcessPageShowsTheLatestAttempts(t *testing.T) {
	eachQueue(t, func(t *testing.T, dsn string, c *queue.Client) {
		ctx := context.Background()
		one := 1
		later := time.Now().Add(time.Hour)
		submit := func(process string, n int) {
			ts := make([]stages.Task, n)
			for i := range ts {
				ts[i] = stages.Task{Body: "SELECT 1", RunAt: later}
			}
			if _, err := c.Submit(ctx, stages.Plan{Process: process, Stages: []stages.Stage{{Order: &one, Tasks: ts}}}); err != nil {
				t.Fatal(err)
			}
		}
		cancelled := func(process string, n int) []dialect.LogEntry { // n Logs rows, one per task
			submit(process, n)
			if _, _, err := c.Dialect().(dialect.Operator).ProcessCancel(ctx, process); err != nil {
				t.Fatal(err)
			}
			trail, err := c.Dialect().LogList(ctx, dialect.LogFilter{Process: process})
			if err != nil || len(trail) != n {
				t.Fatalf("Logs of %s: %d rows, %v; want %d", process, len(trail), err, n)
			}
			return trail // by Logs' order, (started_at, id)
		}
		long, exact := cancelled("long", 401), cancelled("exact", 400)
		submit("wide", 501)
		submit("full", 500)
		base, _ := serve(t, dsn, "--addr", "127.0.0.1:0")
		get := func(path string) string {
			t.Helper()
			code, body := fetch(t, http.MethodGet, base+path)
			if code != http.StatusOK {
				t.Fatalf("GET %s: %d", path, code)
			}
			return body
		}
		drawn := func(page string, e dialect.LogEntry) bool {
			return strings.Contains(page, fmt.Sprintf(`data-task="%d"`, e.TaskID))
		}
		page := get("/process/long")
		if !strings.Contains(page, `id="rows-truncated"`) || !drawn(page, long[1]) || !drawn(page, long[400]) || drawn(page, long[0]) {
			t.Errorf("the timeline of 401 attempts: want the latest 400 drawn and the note; note %v, drawn: oldest %v, 2nd %v, newest %v",
				strings.Contains(page, `id="rows-truncated"`), drawn(page, long[0]), drawn(page, long[1]), drawn(page, long[400]))
		}
		if page := get("/process/exact"); strings.Contains(page, `id="rows-truncated"`) || !drawn(page, exact[0]) {
			t.Error("the timeline of 400 attempts leaves one out, or says so")
		}
		for path, capped := range map[string]bool{"/process/wide": true, "/process/full": false,
			"/tasks?process=wide": true, "/tasks?process=full": false, "/process/long": false} {
			if got := strings.Contains(get(path), `id="tasks-capped"`); got != capped {
				t.Errorf("%s says its task list is capped: %v, want %v", path, got, capped)
			}
		}
	})
}

// TestProcessPagesOfAnyName: every link to a process page reaches that
// process, whatever its name, followed as a browser follows it (dot segments
// resolved first): "." and ".." named in a path would reach the list instead.
func TestProcessPagesOfAnyName(t *testing.T) {
	eachQueue(t, func(t *testing.T, dsn string, c *queue.Client) {
		ctx := context.Background()
		names := []string{".", "..", "a/b", "../x", "x?y#z", "100%", "a b"}
		one := 1
		for _, name := range names {
			if _, err := c.Submit(ctx, stages.Plan{Process: name, Stages: []stages.Stage{{Order: &one, Tasks: []stages.Task{
				{Body: "SELECT 1", RunAt: time.Now().Add(time.Hour)}}}}}); err != nil {
				t.Fatal(err)
			}
		}
		base, _ := serve(t, dsn, "--addr", "127.0.0.1:0")
		root, err := url.Parse(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		// follow GETs a link's href, as the page at from wrote it, and
		// returns where it went and the name that page shows.
		nameOn := regexp.MustCompile(`<span class="name">([^<]*)</span>`)
		follow := func(from *url.URL, href string) (*url.URL, string, string) {
			t.Helper()
			ref, err := url.Parse(html.UnescapeString(href))
			if err != nil {
				t.Fatalf("link %q: %v", href, err)
			}
			to := from.ResolveReference(ref)
			_, page := fetch(t, http.MethodGet, to.String())
			m := nameOn.FindStringSubmatch(page)
			if m == nil {
				return to, "", page
			}
			return to, html.UnescapeString(m[1]), page
		}
		_, list := fetch(t, http.MethodGet, base+"/")
		for _, name := range names {
			link := regexp.MustCompile(`<a href="([^"]*)">` + regexp.QuoteMeta(html.EscapeString(name)) + `</a>`).FindStringSubmatch(list)
			if link == nil {
				t.Errorf("process %q: no link on the processes page", name)
				continue
			}
			at, got, page := follow(root, link[1])
			if got != name {
				t.Errorf("process %q: its link %s shows process %q", name, link[1], got)
				continue
			}
			// The window links keep the process.
			window := regexp.MustCompile(`<a href="([^"]*)">last week</a>`).FindStringSubmatch(page)
			if window == nil {
				t.Errorf("process %q: no window link", name)
			} else if _, got, _ := follow(at, window[1]); got != name {
				t.Errorf("process %q: its window link %s shows process %q", name, window[1], got)
			}
		}
		if code, _ := fetch(t, http.MethodGet, base+"/process"); code != http.StatusBadRequest {
			t.Errorf("/process without a name: %d, want 400", code)
		}
	})
}
