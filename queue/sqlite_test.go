package queue_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
)

// openSQLite opens a migrated queue in a SQLite file of the test's own, closed
// when the test ends. A build without the SQLite dialect (-tags
// stageq_no_sqlite) skips the test and says why: these tests of the queue's Go
// need a database, and SQLite is the one every other build links.
func openSQLite(t *testing.T) (context.Context, *queue.Client) {
	t.Helper()
	if !slices.Contains(dialect.Schemes(), "sqlite") {
		t.Skip("this build links no SQLite dialect (stageq_no_sqlite): the queue package's own tests run on SQLite")
	}
	ctx := context.Background()
	c, err := queue.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "q.db"), queue.Config{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return ctx, c
}
