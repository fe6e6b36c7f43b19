package dashboard_test

import (
	"context"
	"html"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

var (
	logRowRe = regexp.MustCompile(`data-log="(\d+)"`)
	nextRe   = regexp.MustCompile(`id="next" href="([^"]+)"`)
)

// TestLogsPaging pages through more Logs rows than a page holds, many of them
// started at the same instant (SQLite's clock has milliseconds, and one claim
// stamps its rows alike): every row is shown exactly once, in order.
func TestLogsPaging(t *testing.T) {
	eachQueue(t, func(t *testing.T, dsn string, c *queue.Client) {
		ctx := context.Background()
		d := c.Dialect()
		one := 1
		tasks := make([]stages.Task, 230)
		for i := range tasks {
			tasks[i] = stages.Task{Body: "SELECT 1"}
		}
		if _, err := c.Submit(ctx, stages.Plan{Process: "many", Stages: []stages.Stage{{Order: &one, Tasks: tasks}}}); err != nil {
			t.Fatal(err)
		}
		for claimed, token := 0, int64(5); claimed < len(tasks); token++ { // a new token per claim, as a worker does
			got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "pager", Max: 150, Token: token, Lease: time.Minute})
			if err != nil || len(got) == 0 {
				t.Fatalf("claim: %d %v", len(got), err)
			}
			claimed += len(got)
		}
		want, err := d.LogList(ctx, dialect.LogFilter{Process: "many"})
		if err != nil || len(want) != len(tasks) {
			t.Fatalf("logs: %d %v", len(want), err)
		}
		base, _ := serve(t, dsn, "--addr", "127.0.0.1:0")
		next := "?process=many&since=all"
		var seen []int64
		pages := 0
		for next != "" {
			resp, err := http.Get(base + "/logs" + next)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("page %d: %s: %s", pages+1, resp.Status, b)
			}
			pages++
			rows := logRowRe.FindAllSubmatch(b, -1)
			if len(rows) > 100 {
				t.Errorf("page %d has %d rows, more than 100", pages, len(rows))
			}
			for _, m := range rows {
				id, _ := strconv.ParseInt(string(m[1]), 10, 64)
				seen = append(seen, id)
			}
			next = ""
			if m := nextRe.FindSubmatch(b); m != nil {
				next = html.UnescapeString(string(m[1]))
			}
			if pages > 10 {
				t.Fatal("more than 10 pages: the cursor does not advance")
			}
		}
		if len(seen) != len(want) {
			t.Fatalf("saw %d rows on %d pages, Logs has %d", len(seen), pages, len(want))
		}
		for i, e := range want {
			if seen[i] != e.ID {
				t.Fatalf("row %d: page shows log %d, Logs order has %d", i, seen[i], e.ID)
			}
		}
		if pages != 3 {
			t.Errorf("%d pages for %d rows, want 3", pages, len(want))
		}
	})
}
