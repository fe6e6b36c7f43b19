// Package queuetest prepares queue databases for the tests of the packages
// above package queue (the dashboard's, queuectl's), which cannot share test
// helpers otherwise.
package queuetest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stageq/stageq/internal/pgtest"
	"github.com/stageq/stageq/queue"
)

// Migrated applies the schema to the database at dsn and returns dsn; a
// database that cannot be opened or migrated fails the test.
func Migrated(tb testing.TB, dsn string) string {
	tb.Helper()
	c, err := queue.Open(context.Background(), dsn, queue.Config{Migrate: true})
	if err != nil {
		tb.Fatal(err)
	}
	c.Close()
	return dsn
}

// EachDatabase runs fn as the subtests "sqlite" and "postgres", each on a
// fresh, migrated database: a SQLite file in the subtest's temporary directory
// and a PostgreSQL database named after prefix (pgtest.NewDatabase). parallel
// runs the two subtests at once; a caller whose subtests are heavy (a browser
// each) runs them one after the other.
func EachDatabase(t *testing.T, prefix string, parallel bool, fn func(t *testing.T, dsn string)) {
	t.Run("sqlite", func(t *testing.T) {
		if parallel {
			t.Parallel()
		}
		fn(t, Migrated(t, "sqlite://"+filepath.Join(t.TempDir(), "q.db")))
	})
	t.Run("postgres", func(t *testing.T) {
		if parallel {
			t.Parallel()
		}
		fn(t, Migrated(t, pgtest.NewDatabase(t, prefix)))
	})
}

// Client opens the queue at dsn (already migrated) and closes it when the
// test ends; a queue that cannot be opened fails the test.
func Client(tb testing.TB, dsn string) *queue.Client {
	tb.Helper()
	c, err := queue.Open(context.Background(), dsn, queue.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}
