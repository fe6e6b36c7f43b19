package sqlite

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	msqlite "modernc.org/sqlite"

	"github.com/stageq/stageq/dialect"
)

// TestLogUpdatesCompileOnce: after an ANALYZE has sampled Logs (sqlite_stat4),
// the per-task Logs updates of a finish and of a rescue must still be compiled
// once and run many times, and still search Logs by its task key and match
// the same rows. A statement that compares a bare ? with the index's columns
// is compiled again after every new binding (finishLogSQL says why); SQLite's
// authorizer, which runs while a statement is compiled, counts the
// compilations.
func TestLogUpdatesCompileOnce(t *testing.T) {
	ctx := context.Background()
	s := migrated(t).(*SQLite)
	analyzedLogs(t, s.db, 2)
	var samples int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_stat4 WHERE idx = 'stageq_logs_task'`).Scan(&samples); err != nil {
		t.Fatal(err)
	}
	if samples == 0 {
		t.Fatal("ANALYZE left no sqlite_stat4 samples of stageq_logs_task: this build has no STAT4, and the test proves nothing")
	}

	conn, err := s.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var compiles atomic.Int64 // compilations of an UPDATE that sets Logs.outcome
	authorize := func(action msqlite.AuthorizerActionCode, table, column, _, _ string) msqlite.AuthorizerReturnCode {
		if action == msqlite.AuthUpdate && table == "stageq_logs" && column == "outcome" {
			compiles.Add(1)
		}
		return msqlite.AuthorizerOK
	}
	setAuthorizer := func(fn msqlite.AuthorizerFn) {
		t.Helper()
		if err := conn.Raw(func(dc any) error {
			return dc.(msqlite.AuthorizerRegisterer).RegisterAuthorizer(fn)
		}); err != nil {
			t.Fatal(err)
		}
	}
	setAuthorizer(authorize)
	defer setAuthorizer(nil)

	const byTaskAndToken = "INDEX stageq_logs_task (task_id=? AND lease_token=?)"
	for name, c := range map[string]struct {
		q    string
		args func(id int) []any
		seek string // what the plan must say
	}{
		"finish": {finishLogSQL, func(id int) []any { return []any{"succeeded", nil, nil, id, id} }, byTaskAndToken},
		"rescue": {rescueLogSQL, func(id int) []any { return []any{"lease expired", id, id} }, byTaskAndToken},
		// A batch seeks each task, then tests its few Logs rows for the attempt.
		"finish many": {finishLogSucceededManySQL, func(id int) []any {
			ids, attempts := leasePairs([]dialect.TaskLease{{ID: int64(id), Token: int64(id)}})
			return []any{ids, attempts}
		}, "INDEX stageq_logs_task (task_id=?)"},
	} {
		compiles.Store(0)
		stmt, err := conn.PrepareContext(ctx, c.q)
		if err != nil {
			t.Fatalf("%s: prepare: %v", name, err)
		}
		for id := 1; id <= 20; id++ {
			res, err := stmt.ExecContext(ctx, c.args(id)...)
			if err != nil {
				t.Fatalf("%s: task %d: %v", name, id, err)
			}
			// Logs holds rows for tasks 1 and 2, each under its own id as token.
			want := int64(0)
			if id <= 2 {
				want = 1
			}
			if n, err := res.RowsAffected(); err != nil || n != want {
				t.Errorf("%s: task %d: %d rows updated (%v), want %d", name, id, n, err, want)
			}
		}
		stmt.Close()
		if n := compiles.Load(); n != 1 {
			t.Errorf("%s's Logs update was compiled %d times for 20 calls with an ANALYZE's samples in place, want once", name, n)
		}
		if got := queryPlan(t, s, c.q, c.args(1)...); !strings.Contains(got, c.seek) {
			t.Errorf("%s's Logs update after an ANALYZE: plan %q, want a search of stageq_logs_task by the task key", name, got)
		}
	}
}
