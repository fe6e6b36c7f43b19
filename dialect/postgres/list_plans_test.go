package postgres

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"

	"github.com/stageq/stageq/internal/pgtest"
	"github.com/stageq/stageq/migrations"
)

// The operator's lists (the dashboard's pages, queuectl status and logs) run
// as prepared statements, every refresh. After five runs PostgreSQL may plan
// one generically, for any parameters; these tests run each six times, as
// asked, and then read the plan it keeps.

// TestLogListSeeksAProcessByID: the process page reads its timeline by the
// process's id, newest first. Beside a Logs table grown by other processes it
// must seek logs_process instead of reading every row of Logs, as it does by
// name (Logs has no index on names).
func TestLogListSeeksAProcessByID(t *testing.T) {
	conn := planConn(t, `
INSERT INTO stageq.logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt, lease_token, outcome)
SELECT g, CASE WHEN g <= 3 THEN 7 ELSE 8 END, CASE WHEN g <= 3 THEN 'mine' ELSE 'others' END, 100, 'sql', 'SELECT 1', 'w', 1, g, 'succeeded'
  FROM generate_series(1, 20003) g`, `ANALYZE stageq.logs`)
	// As the page asks: name and id.
	plan := planAfterRuns(t, conn, logListNewestSQL, `('mine', 0, '', '', now() - interval '1 hour', 401, 0, 7)`, 3)
	if !strings.Contains(plan, "logs_process") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("the timeline's plan after six runs does not seek logs_process:\n%s", plan)
	}
}

// TestProcessListReadsOnlyWhatItShows: beside 20,000 finished processes,
// which retention keeps for 90 days, the processes list and its two counts
// read the open processes through processes_open, a named one through its
// name and every process up to the list's bound: never the whole table. The
// done counts seek Logs by process.
func TestProcessListReadsOnlyWhatItShows(t *testing.T) {
	conn := planConn(t, `
INSERT INTO stageq.processes (name, state, finished_at)
SELECT 'done-' || lpad(g::text, 6, '0'), CASE WHEN g % 10 = 0 THEN 'cancelled' ELSE 'succeeded' END, now()
  FROM generate_series(1, 20000) g`, `
INSERT INTO stageq.processes (name, state, current_order)
SELECT 'open-' || g, CASE WHEN g = 1 THEN 'failed' ELSE 'active' END, 100 FROM generate_series(1, 3) g`,
		// Each finished process left five succeeded attempts in Logs, and
		// each open one two.
		`
INSERT INTO stageq.logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt, lease_token, outcome)
SELECT p.id * 10 + g, p.id, p.name, 100, 'sql', 'SELECT 1', 'w', 1, 1, 'succeeded'
  FROM stageq.processes p, generate_series(1, 5) g
 WHERE g <= 2 OR p.state IN ('succeeded', 'cancelled')`,
		`ANALYZE stageq.processes`, `ANALYZE stageq.logs`)
	for _, c := range []struct {
		what, args string
		rows       int
		way        string // the index the plan must read processes through
	}{
		{"the open processes", `('', false, 501)`, 3, "processes_open"},
		{"a process by name", `('done-000123', false, 501)`, 1, "processes_name_key"},
		{"every process, up to the bound", `('', true, 501)`, 501, "processes_name_key"},
	} {
		for stmt, text := range map[string]string{"list": processListSQL, "stage counts": stageCountSQL, "done counts": stageDoneSQL} {
			rows := c.rows // a process, or its one stage's done count
			if stmt == "stage counts" {
				rows = 0 // no task is left in the queue
			}
			plan := planAfterRuns(t, conn, text, c.args, rows)
			if !strings.Contains(plan, c.way) || strings.Contains(plan, "Seq Scan on processes") {
				t.Errorf("%s, %s: the plan after six runs does not read processes through %s:\n%s", c.what, stmt, c.way, plan)
			}
			if stmt == "done counts" && (!strings.Contains(plan, "logs_process") || strings.Contains(plan, "Seq Scan on logs")) {
				t.Errorf("%s, %s: the plan after six runs does not seek Logs by process:\n%s", c.what, stmt, plan)
			}
		}
	}
}

// TestTaskListReadsOpenProcessesByKey: the task list (queuectl tasks, the
// dashboard's tasks page, --exit-when-idle) reads the open processes through
// processes_open and each one's tasks through its key, never every process
// by name (20,000 finished ones here, sorted before the open ones) nor every
// available task once per process, which statistics taken while no task
// waited (an idle queue's) made the cheaper plan for a list of the available
// ones.
func TestTaskListReadsOpenProcessesByKey(t *testing.T) {
	conn := planConn(t, `
INSERT INTO stageq.processes (name, state, finished_at)
SELECT 'done-' || lpad(g::text, 6, '0'), 'succeeded', now() FROM generate_series(1, 20000) g`, `
INSERT INTO stageq.processes (name, state, current_order) VALUES ('open-0', 'active', 100)`,
		`ANALYZE stageq.processes`, `ANALYZE stageq.tasks`, `ALTER TABLE stageq.tasks SET (autovacuum_enabled = off)`, `
INSERT INTO stageq.processes (name, state, current_order)
SELECT 'open-' || g, 'active', 100 FROM generate_series(1, 299) g`, `
INSERT INTO stageq.tasks (process_id, execution_order, body, state)
SELECT p.id, CASE WHEN g <= 40 THEN 100 ELSE 200 END, 'SELECT 1', 'blocked'
  FROM stageq.processes p, generate_series(1, 120) g
 WHERE p.name LIKE 'open-%'`,
		// Each process's first stage opens, as submissions open it.
		`UPDATE stageq.tasks SET state = 'available' WHERE execution_order = 100`)
	for _, c := range []struct {
		what, args string
		rows       int
		way        string
	}{
		{"the available tasks", `('', 'available', 500, '')`, 500, "processes_open"},
		{"every task", `('', '', 500, '')`, 500, "processes_open"},
		{"a process's tasks", `('open-7', '', 500, '')`, 120, "processes_name_key"},
	} {
		// A one-off list (queuectl's) is planned for its values; a list
		// run again and again (the dashboard's) may be planned generically.
		for _, mode := range []string{"force_custom_plan", "auto"} {
			if _, err := conn.ExecContext(context.Background(), "SET plan_cache_mode = "+mode); err != nil {
				t.Fatal(err)
			}
			plan := planAfterRuns(t, conn, taskListSQL, c.args, c.rows)
			if !strings.Contains(plan, c.way) || !strings.Contains(plan, "tasks_waiting") ||
				strings.Contains(plan, "tasks_claim") || strings.Contains(plan, "Seq Scan") {
				t.Errorf("%s, plan_cache_mode %s: the plan after six runs does not read processes through %s and their tasks through tasks_waiting:\n%s", c.what, mode, c.way, plan)
			}
		}
	}
}

// planConn opens a migrated database of the test's own, runs setup on it and
// returns one connection: a prepared statement lives in its session.
func planConn(t *testing.T, setup ...string) *sql.Conn {
	t.Helper()
	ctx := context.Background()
	d, err := Open(ctx, pgtest.NewDatabase(t, "stageq_plan"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if _, err := migrations.Up(ctx, d); err != nil {
		t.Fatal(err)
	}
	conn, err := d.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	for _, q := range setup {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return conn
}

// planned counts the statements planAfterRuns prepared, to name each anew
// (the session's other prepared statements are pgx's: they stay).
var planned int

// planAfterRuns prepares stmt, runs it six times with args (checking that each
// run returns rows rows, unless rows is -1) and returns the plan PostgreSQL
// then keeps for it.
func planAfterRuns(t *testing.T, conn *sql.Conn, stmt, args string, rows int) string {
	t.Helper()
	ctx := context.Background()
	planned++
	name := "planned" + strconv.Itoa(planned)
	if _, err := conn.ExecContext(ctx, `PREPARE `+name+` AS `+stmt); err != nil {
		t.Fatalf("prepare: %v\n%s", err, stmt)
	}
	for range 6 {
		r, err := conn.QueryContext(ctx, `EXECUTE `+name+args)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for r.Next() {
			n++
		}
		r.Close()
		if rows >= 0 && n != rows {
			t.Fatalf("EXECUTE %s%s: %d rows, want %d\n%s", name, args, n, rows, stmt)
		}
	}
	r, err := conn.QueryContext(ctx, `EXPLAIN EXECUTE `+name+args)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var plan []string
	for r.Next() {
		var line string
		if err := r.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	return strings.Join(plan, "\n")
}
