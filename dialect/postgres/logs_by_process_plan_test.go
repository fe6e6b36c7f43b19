package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/stageq/stageq/internal/pgtest"
	"github.com/stageq/stageq/migrations"
)

// TestLogListSeeksAProcessByID: the process page reads its timeline by the
// process's id, newest first, every refresh. Beside a Logs table grown by
// other processes it must seek logs_process, also once PostgreSQL has run the
// statement often enough to consider a generic plan (after five runs of a
// prepared statement), instead of reading every row of Logs, as it does by
// name (Logs has no index on names).
func TestLogListSeeksAProcessByID(t *testing.T) {
	ctx := context.Background()
	d, err := Open(ctx, pgtest.NewDatabase(t, "stageq_plan"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := migrations.Up(ctx, d); err != nil {
		t.Fatal(err)
	}
	conn, err := d.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{`
INSERT INTO stageq.logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt, lease_token, outcome)
SELECT g, CASE WHEN g <= 3 THEN 7 ELSE 8 END, CASE WHEN g <= 3 THEN 'mine' ELSE 'others' END, 100, 'sql', 'SELECT 1', 'w', 1, g, 'succeeded'
  FROM generate_series(1, 20003) g`,
		`ANALYZE stageq.logs`,
		`PREPARE timeline AS ` + logListNewestSQL,
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	const args = `('mine', 0, '', '', now() - interval '1 hour', 401, 0, 7)` // as the page asks: name and id
	for range 6 {
		rows, err := conn.QueryContext(ctx, `EXECUTE timeline`+args)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		if n != 3 {
			t.Fatalf("the timeline of process 7: %d rows, want 3", n)
		}
	}
	rows, err := conn.QueryContext(ctx, `EXPLAIN EXECUTE timeline`+args)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if text := strings.Join(plan, "\n"); !strings.Contains(text, "logs_process") || strings.Contains(text, "Seq Scan") {
		t.Errorf("the timeline's plan after six runs does not seek logs_process:\n%s", text)
	}
}
