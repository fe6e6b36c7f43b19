package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
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
// processes page shows the first ones by name and says that it stopped.
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
	})
}

// TestProcessPageShowsTheLatestAttempts: a process whose window holds more
// attempts than the timeline reads (2,000) and draws (400) shows the latest
// ones, a long process's live end, and says so; one with more waiting tasks
// than the page lists says that too.
func TestProcessPageShowsTheLatestAttempts(t *testing.T) {
	eachQueue(t, func(t *testing.T, dsn string, c *queue.Client) {
		ctx := context.Background()
		one := 1
		later := time.Now().Add(time.Hour)
		waiting := func(n int) []stages.Task {
			ts := make([]stages.Task, n)
			for i := range ts {
				ts[i] = stages.Task{Body: "SELECT 1", RunAt: later}
			}
			return ts
		}
		res, err := c.Submit(ctx, stages.Plan{Process: "long", Stages: []stages.Stage{{Order: &one, Tasks: waiting(2001)}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Dialect().(dialect.Operator).ProcessCancel(ctx, "long"); err != nil {
			t.Fatal(err) // 2,001 Logs rows, one per task
		}
		if _, err := c.Submit(ctx, stages.Plan{Process: "wide", Stages: []stages.Stage{{Order: &one, Tasks: waiting(501)}}}); err != nil {
			t.Fatal(err)
		}
		base, _ := serve(t, dsn, "--addr", "127.0.0.1:0")
		get := func(path string) string {
			t.Helper()
			code, body := fetch(t, http.MethodGet, base+path)
			if code != http.StatusOK {
				t.Fatalf("GET %s: %d", path, code)
			}
			return body
		}
		trail, err := c.Dialect().LogList(ctx, dialect.LogFilter{Process: "long"})
		if err != nil || len(trail) != len(res.TaskIDs) {
			t.Fatalf("Logs of the cancel: %d rows, %v; want %d", len(trail), err, len(res.TaskIDs))
		}
		page := get("/process/long")
		first, last := trail[0].TaskID, trail[len(trail)-1].TaskID // by Logs' order, (started_at, id)
		drawn := func(task int64) bool { return strings.Contains(page, fmt.Sprintf(`data-task="%d"`, task)) }
		if !strings.Contains(page, `id="logs-capped"`) || !strings.Contains(page, `id="rows-truncated"`) || !drawn(last) || drawn(first) ||
			drawn(trail[len(trail)-401].TaskID) || !drawn(trail[len(trail)-400].TaskID) {
			t.Errorf("the timeline of 2,001 attempts: want the latest 400 of the latest 2,000 drawn and both notes; notes %v %v, drawn: last %v, first %v",
				strings.Contains(page, `id="logs-capped"`), strings.Contains(page, `id="rows-truncated"`), drawn(last), drawn(first))
		}
		if page := get("/process/wide"); !strings.Contains(page, `id="tasks-capped"`) {
			t.Error("the page of a process of 501 waiting tasks does not say it lists the first 500")
		}
		if strings.Contains(get("/process/long"), `id="tasks-capped"`) {
			t.Error("a process without waiting tasks says its task list is capped")
		}
	})
}
