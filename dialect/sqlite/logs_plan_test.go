package sqlite

import (
	"context"
	"strings"
	"testing"

	"github.com/stageq/stageq/dialect"
)

// TestLogsUpdatesSeekAfterAnEarlyAnalyze: SQLite plans by the statistics of
// the last ANALYZE (or PRAGMA optimize), which nothing refreshes. Taken while
// Logs held one row, they made the planner scan Logs in each finish and each
// rescue, however large it grew. Each Logs update by task must still seek.
func TestLogsUpdatesSeekAfterAnEarlyAnalyze(t *testing.T) {
	d := migrated(t)
	analyzedLogs(t, d.DB(), 1)
	for name, c := range map[string]struct {
		q    string
		args []any
	}{
		"finish":      {finishLogSQL, []any{"succeeded", nil, nil, 1, 1}},
		"finish many": {finishLogSucceededManySQL, []any{"[1]", `["1:1"]`}},
		"rescue":      {rescueLogSQL, []any{"lease expired", 1, 1}},
	} {
		if got := queryPlan(t, d, c.q, c.args...); !strings.Contains(got, "INDEX stageq_logs_task (task_id=?") {
			t.Errorf("%s's Logs update after an ANALYZE of one Logs row: plan %q, want a seek on stageq_logs_task", name, got)
		}
	}
}

// TestBatchSuccessSeeksTasksByKey: a batch's successes are deleted in one
// statement whose fence is a test of (id, token) pairs; the planner must
// still seek each task by its key, not read Tasks whole and test every row.
func TestBatchSuccessSeeksTasksByKey(t *testing.T) {
	d := migrated(t)
	got := queryPlan(t, d, finishSucceededManySQL, "[1,2]", `["1:1","2:1"]`)
	if !strings.Contains(got, "SEARCH stageq_tasks USING INTEGER PRIMARY KEY") || strings.Contains(got, "SCAN stageq_tasks") {
		t.Errorf("plan %q, want stageq_tasks searched by its key and never scanned", got)
	}
}

// TestExtendSeeksTasksByKey: a heartbeat extends every lease its worker holds
// in one statement. Each task must be sought by its key, and the list of
// attempts built once: as a subquery correlated with each of the worker's
// tasks, it was read whole once per task (a thousand leases, a million
// comparisons, inside SQLite's one write lock).
func TestExtendSeeksTasksByKey(t *testing.T) {
	d := migrated(t)
	ids, attempts := leasePairs([]dialect.TaskLease{{ID: 1, Token: 7}, {ID: 2, Token: 7}})
	got := queryPlan(t, d, extendSQL, "+30 seconds", "w", ids, attempts)
	// By the key, or by the worker's index with the key (its rows end in it).
	if !strings.Contains(got, "SEARCH stageq_tasks") || !strings.Contains(got, "rowid=?") ||
		strings.Contains(got, "SCAN stageq_tasks") || strings.Contains(got, "CORRELATED") {
		t.Errorf("plan %q, want stageq_tasks searched by its key and no correlated subquery", got)
	}
}

// queryPlan returns what EXPLAIN QUERY PLAN says of q, its steps joined by "; ".
func queryPlan(t *testing.T, d dialect.Dialect, q string, args ...any) string {
	t.Helper()
	rows, err := d.DB().QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatalf("explain %s: %v", q, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "; ")
}
