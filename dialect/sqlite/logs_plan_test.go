package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stageq/stageq/migrations"
)

// TestLogsUpdatesSeekAfterAnEarlyAnalyze: SQLite plans by the statistics of
// the last ANALYZE (or PRAGMA optimize), which nothing refreshes. Taken while
// Logs held one row, they made the planner scan Logs in each finish and each
// rescue, however large it grew. Each Logs update by task must still seek.
func TestLogsUpdatesSeekAfterAnEarlyAnalyze(t *testing.T) {
	ctx := context.Background()
	d, err := Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "queue.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := migrations.Up(ctx, d); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO stageq_logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt, lease_token)
		 VALUES (1, 1, 'p', 100, 'sql', 'SELECT 1', 'w', 1, 1)`,
		`ANALYZE`,
	} {
		if _, err := d.DB().ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for name, c := range map[string]struct {
		q    string
		args []any
	}{
		"finish": {finishLogSQL, []any{"succeeded", nil, nil, 1, 1}},
		"rescue": {rescueLogSQL, []any{"lease expired", 1, 1}},
	} {
		rows, err := d.DB().QueryContext(ctx, "EXPLAIN QUERY PLAN "+c.q, c.args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if got := strings.Join(plan, "; "); !strings.Contains(got, "USING INDEX stageq_logs_task") {
			t.Errorf("%s's Logs update after an ANALYZE of one Logs row: plan %q, want a seek on stageq_logs_task", name, got)
		}
	}
}
