package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

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
