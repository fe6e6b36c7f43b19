// Package queuetest prepares queue databases for the tests of the packages
// above package queue (the dashboard's, queuectl's), which cannot share test
// helpers otherwise.
package queuetest

import (
	"context"
	"testing"

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
