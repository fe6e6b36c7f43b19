package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// tableStats are a table's row counters, its sequential scans, the rows its
// scans returned (sequential and by index) and the entries read through one of
// its indexes, from pg_stat_user_tables and pg_stat_user_indexes.
type tableStats struct {
	Inserted, Updated, Deleted, SeqScans, RowsRead, IndexRead int64
}

// waitStats polls table's counters (index: the one whose reads count) until
// ready says they are complete, and returns them. A backend reports its
// counters within about a second of going idle, so ready is how a test knows
// that every statement it ran is in: it fails the test if ready reports
// overshoot or 60 s pass.
func waitStats(tb testing.TB, d dialect.Dialect, table, index string, ready func(s tableStats) (done, overshoot bool)) tableStats {
	tb.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var s tableStats
		if err := d.DB().QueryRowContext(context.Background(), `
SELECT t.n_tup_ins, t.n_tup_upd, t.n_tup_del, t.seq_scan,
       coalesce(t.seq_tup_read, 0) + coalesce(t.idx_tup_fetch, 0), i.idx_tup_read
  FROM pg_stat_user_tables t JOIN pg_stat_user_indexes i ON i.relid = t.relid AND i.indexrelname = $2
 WHERE t.relid = $1::regclass`, table, index).Scan(&s.Inserted, &s.Updated, &s.Deleted, &s.SeqScans, &s.RowsRead, &s.IndexRead); err != nil {
			tb.Fatal(err)
		}
		done, over := ready(s)
		if done {
			return s
		}
		if over || time.Now().After(deadline) {
			tb.Fatalf("%s counters %+v never reached what the test wrote", table, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// settledStats waits until table's counters stop moving for 3 s (an idle
// backend reports within about a second) and returns them: waitStats for a
// test that has no exact count of its writes to wait for.
func settledStats(tb testing.TB, d dialect.Dialect, table, index string) tableStats {
	tb.Helper()
	var last tableStats
	since := time.Now()
	return waitStats(tb, d, table, index, func(s tableStats) (bool, bool) {
		if s != last {
			last, since = s, time.Now()
			return false, false
		}
		return time.Since(since) >= 3*time.Second, false
	})
}
