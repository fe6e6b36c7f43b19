package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	rsrc "github.com/stageq/stageq/routines/postgres"
)

// TestRoutinesNeverJIT: the routines that plan with sequential scans off must
// also turn JIT off. A statement with no other path than a sequential scan (the
// read of the sequence stageq.vclock under open_stage) is still planned, at a
// cost past 10^10, and with the server's default jit_above_cost PostgreSQL
// compiled it to machine code on every call: 9 ms each, which made every stage
// handoff take 28 ms instead of 1.6 ms, and a rescue of 3 tasks 347 ms.
// auto_explain, loaded in this test's session, reports each statement the
// routines run, and whether it was compiled.
func TestRoutinesNeverJIT(t *testing.T) {
	ctx := context.Background()
	_, dsn := migratedDSN(t, "stageq_jit")

	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var plans []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		plans = append(plans, n.Message)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	r := fmt.Sprintf("stageq_r%d", rsrc.Version)
	run := func(q string, args ...any) pgx.Rows {
		t.Helper()
		rows, err := conn.Query(ctx, q, args...)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return rows
	}
	exec := func(q string, args ...any) {
		t.Helper()
		rows := run(q, args...)
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := conn.Exec(ctx, "LOAD 'auto_explain'"); err != nil {
		// Loading a library takes a superuser; pgtest allows any role that
		// may create databases.
		t.Skipf("auto_explain cannot be loaded by this test's role (%v): nothing to observe JIT with", err)
	}
	for _, s := range []string{
		"SET auto_explain.log_min_duration = 0",
		"SET auto_explain.log_nested_statements = on", "SET auto_explain.log_level = notice",
		"SET client_min_messages = notice", "SET jit = on", // the server default, whatever the test server says
	} {
		exec(s)
	}
	// The control: does this server compile such a statement at all? Not
	// where JIT is unavailable (no LLVM), nor where a disabled path no longer
	// costs 10^10 (PostgreSQL 18).
	exec("SET enable_seqscan = off")
	exec("SELECT last_value FROM stageq.vclock")
	exec("RESET enable_seqscan")
	mu.Lock()
	control := len(plans) > 0 && strings.Contains(plans[len(plans)-1], "JIT:")
	plans = nil
	mu.Unlock()
	if !control {
		t.Skip("this server does not JIT-compile a statement planned with a disabled path: nothing to guard against here")
	}

	// A submission opens a stage; a task due a moment later takes the claim's
	// path for scheduled tasks (vnow); the finish empties the stage, advance
	// opens the next; the rescue runs its pass.
	exec(`SELECT * FROM `+r+`.submit('jit', $1::jsonb)`,
		`[{"execution_order": 100, "body": "SELECT 1", "delay_ms": 1}, {"execution_order": 200, "body": "SELECT 2"}]`)
	time.Sleep(20 * time.Millisecond)
	rows := run(`SELECT id, process_id FROM ` + r + `.claim(10, 'w', 7, 60000, NULL)`)
	var ids, pids []int64
	for rows.Next() {
		var id, pid int64
		if err := rows.Scan(&id, &pid); err != nil {
			t.Fatal(err)
		}
		ids, pids = append(ids, id), append(pids, pid)
	}
	if rows.Err() != nil || len(ids) != 1 {
		t.Fatalf("claim: %v, %v", ids, rows.Err())
	}
	exec(`SELECT * FROM `+r+`.finish_many($1, $2, $3, $4, $5)`, ids, []int64{7}, []string{"succeeded"}, []string{""}, []int64{0})
	exec(`SELECT * FROM `+r+`.advance($1)`, pids)
	// The second stage's task, leased for 1 ms to a worker that never comes
	// back: the rescue hands it back and reopens its stage.
	exec(`SELECT * FROM ` + r + `.claim(10, 'gone', 8, 1, NULL)`)
	time.Sleep(20 * time.Millisecond)
	var rescued int
	if err := conn.QueryRow(ctx, `SELECT `+r+`.rescue(100)`).Scan(&rescued); err != nil || rescued != 1 {
		t.Fatalf("rescue: %d tasks, %v", rescued, err)
	}
	var order int
	if err := conn.QueryRow(ctx, `SELECT current_order FROM stageq.processes WHERE name = 'jit'`).Scan(&order); err != nil || order != 200 {
		t.Fatalf("the second stage did not open: order %d, %v", order, err)
	}

	mu.Lock()
	defer mu.Unlock()
	vclock := 0
	for _, p := range plans {
		if strings.Contains(p, "FROM stageq.vclock") {
			vclock++
		}
		if strings.Contains(p, "JIT:") {
			t.Errorf("a routine's statement was compiled with JIT:\n%s", p)
		}
	}
	// Proof that auto_explain saw the statements in question.
	if vclock == 0 {
		t.Fatalf("auto_explain reported no read of stageq.vclock among %d plans", len(plans))
	}
	t.Logf("%d plans, %d of them reading stageq.vclock, none compiled", len(plans), vclock)
}
