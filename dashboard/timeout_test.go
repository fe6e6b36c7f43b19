package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/queue"
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
