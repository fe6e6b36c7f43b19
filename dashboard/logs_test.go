package dashboard_test

import (
	"context"
	"html"
	"io"
	"net/http"
	"regexp"
	"slices"
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
// stamps its rows alike; a bulk cancel stamps hundreds alike on every
// dialect): every row is shown exactly once, in order.
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
		if seen, pages := pageLogs(t, base, "?process=many&since=all"); !slices.Equal(seen, logIDs(want)) || pages != 3 {
			t.Errorf("pages showed %v in %d pages; want Logs' order %v in 3", seen, pages, logIDs(want))
		}

		// A bulk cancel writes every row at one instant: more than two pages of
		// them must page through as well.
		bulk := make([]stages.Task, 450)
		for i := range bulk {
			bulk[i] = stages.Task{Body: "SELECT 1", RunAt: time.Now().Add(time.Hour)}
		}
		if _, err := c.Submit(ctx, stages.Plan{Process: "bulk", Stages: []stages.Stage{{Order: &one, Tasks: bulk}}}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := d.(dialect.Operator).ProcessCancel(ctx, "bulk"); err != nil {
			t.Fatal(err)
		}
		want, err = d.LogList(ctx, dialect.LogFilter{Process: "bulk"})
		if err != nil || len(want) != len(bulk) {
			t.Fatalf("logs: %d %v", len(want), err)
		}
		same := 0
		for _, e := range want {
			if e.StartedAt.Equal(want[0].StartedAt) {
				same++
			}
		}
		if same <= 200 {
			t.Fatalf("only %d of the cancel's Logs rows share its first instant; the case needs more than two pages of them", same)
		}
		// A filter no list knows is refused, as queuectl refuses it, not shown
		// as an empty list.
		for _, path := range []string{"/logs?outcome=bogus", "/tasks?state=bogus"} {
			if code, _ := fetch(t, http.MethodGet, base+path); code != http.StatusBadRequest {
				t.Errorf("%s: %d, want 400", path, code)
			}
		}
		if seen, pages := pageLogs(t, base, "?process=bulk&since=all"); !slices.Equal(seen, logIDs(want)) || pages != 5 {
			t.Errorf("pages showed %d rows in %d pages, in Logs' order: %v; want %d in 5", len(seen), pages,
				slices.Equal(seen, logIDs(want)), len(want))
		}
	})
}

func logIDs(es []dialect.LogEntry) []int64 {
	ids := make([]int64, len(es))
	for i, e := range es {
		ids[i] = e.ID
	}
	return ids
}

// pageLogs follows the Logs page's "next" links from query and returns the
// ids of the rows shown, in order, and how many pages it read.
func pageLogs(t *testing.T, base, query string) (seen []int64, pages int) {
	t.Helper()
	for next := query; next != ""; {
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
		if pages > 20 {
			t.Fatal("more than 20 pages: the cursor does not advance")
		}
	}
	return seen, pages
}
