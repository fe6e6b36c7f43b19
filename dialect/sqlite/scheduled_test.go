package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/migrations"
)

// TestDelayedTasksWaitOutsideTheClaimIndex: a task whose run_at lies ahead (a
// delay, a retry's backoff, a stage opened before its run_at) waits as
// scheduled, so stageq_tasks_claim, which every claim walks, holds none of
// them (before version 15 it held them all, and every claim read past them);
// the claim makes it available once due, and a pause and a resume keep it
// waiting for its run_at.
func TestDelayedTasksWaitOutsideTheClaimIndex(t *testing.T) {
	ctx := context.Background()
	d := migrated(t)
	db := d.DB()
	res, err := d.Submit(ctx, nil, dialect.SubmitParams{Process: "p", Tasks: []dialect.NewTask{
		{Order: 100, Kind: "sql", Body: "SELECT 'now'", MaxAttempts: 3},
		{Order: 100, Kind: "sql", Body: "SELECT 'in an hour'", MaxAttempts: 3, Delay: time.Hour},
		{Order: 100, Kind: "sql", Body: "SELECT 'soon'", MaxAttempts: 3, Delay: time.Second},
		{Order: 200, Kind: "sql", Body: "SELECT 'next stage'", MaxAttempts: 3, Delay: time.Hour},
	}})
	if err != nil {
		t.Fatal(err)
	}
	now, hour, soon, next := res.TaskIDs[0], res.TaskIDs[1], res.TaskIDs[2], res.TaskIDs[3]
	wantStates(t, d, map[int64]string{now: "available", hour: "scheduled", soon: "scheduled", next: "blocked"})
	if n := claimIndexed(t, d); n != 1 {
		t.Fatalf("stageq_tasks_claim holds %d tasks, want 1 (the one due)", n)
	}

	got := claimIDs(t, d, 1)
	if len(got) != 1 || got[0] != now {
		t.Fatalf("first claim took %v, want only task %d (the others are not due)", got, now)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got = claimIDs(t, d, 2)
		if len(got) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the task delayed by a second was not claimed within 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(got) != 1 || got[0] != soon {
		t.Fatalf("claim after the short delay took %v, want only task %d", got, soon)
	}

	// A retry backs off as scheduled; the success of the first task leaves
	// the stage open.
	if err := d.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: now, Token: 1, ProcessID: res.ProcessID, Outcome: dialect.OutcomeSucceeded}); err != nil {
		t.Fatal(err)
	}
	if err := d.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: soon, Token: 2, ProcessID: res.ProcessID,
		Outcome: dialect.OutcomeFailed, Error: "boom", RetryAfter: time.Hour}); err != nil {
		t.Fatal(err)
	}
	wantStates(t, d, map[int64]string{hour: "scheduled", soon: "scheduled", next: "blocked"})

	op, ok := d.(dialect.Operator)
	if !ok {
		t.Fatal("the SQLite dialect is no dialect.Operator")
	}
	if err := op.ProcessSetPaused(ctx, "p", true); err != nil {
		t.Fatal(err)
	}
	wantStates(t, d, map[int64]string{hour: "blocked", soon: "blocked", next: "blocked"})
	if err := op.ProcessSetPaused(ctx, "p", false); err != nil {
		t.Fatal(err)
	}
	wantStates(t, d, map[int64]string{hour: "scheduled", soon: "scheduled", next: "blocked"})
	if n := claimIndexed(t, d); n != 0 {
		t.Fatalf("stageq_tasks_claim holds %d tasks, want none", n)
	}

	// A stage that opens before its tasks' run_at opens them scheduled.
	res2, err := d.Submit(ctx, nil, dialect.SubmitParams{Process: "q", Tasks: []dialect.NewTask{
		{Order: 100, Kind: "sql", Body: "SELECT 1", MaxAttempts: 3},
		{Order: 200, Kind: "sql", Body: "SELECT 2", MaxAttempts: 3, Delay: time.Hour},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got = claimIDs(t, d, 3)
	if len(got) != 1 || got[0] != res2.TaskIDs[0] {
		t.Fatalf("claim took %v, want task %d", got, res2.TaskIDs[0])
	}
	if err := d.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: got[0], Token: 3, ProcessID: res2.ProcessID, Outcome: dialect.OutcomeSucceeded}); err != nil {
		t.Fatal(err)
	}
	wantStates(t, d, map[int64]string{res2.TaskIDs[1]: "scheduled"})
	var cur int
	if err := db.QueryRowContext(ctx, `SELECT current_order FROM stageq_processes WHERE name = 'q'`).Scan(&cur); err != nil || cur != 200 {
		t.Fatalf("process q's open stage: %d, %v; want 200", cur, err)
	}
}

// TestMigration15: the table is rebuilt with the same rows, a task that waited
// available for a future run_at becomes scheduled, and ids are never reused:
// the key sequence goes on from the highest id given out, though that task has
// left. Down and up again round-trip.
func TestMigration15(t *testing.T) {
	ctx := context.Background()
	d := migrated(t)
	db := d.DB()
	m, err := migrations.Migrator(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Migrate(14); err != nil {
		t.Fatalf("down to 14: %v", err)
	}
	exec := func(q string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`INSERT INTO stageq_processes (name, current_order) VALUES ('p', 100)`)
	exec(`INSERT INTO stageq_tasks (id, process_id, execution_order, body, state, run_at)
SELECT 1, id, 100, 'SELECT 1', 'available', strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 hour') FROM stageq_processes WHERE name = 'p'`)
	exec(`INSERT INTO stageq_tasks (id, process_id, execution_order, body, state)
SELECT 2, id, 100, 'SELECT 2', 'available' FROM stageq_processes WHERE name = 'p'`)
	exec(`INSERT INTO stageq_tasks (id, process_id, execution_order, body, state)
SELECT 3, id, 200, 'SELECT 3', 'blocked' FROM stageq_processes WHERE name = 'p'`)
	exec(`INSERT INTO stageq_tasks (id, process_id, execution_order, body, state)
SELECT 90, id, 100, 'SELECT 90', 'available' FROM stageq_processes WHERE name = 'p'`)
	exec(`DELETE FROM stageq_tasks WHERE id = 90`) // succeeded: its id lives on in Logs
	orphan(t, db, `INSERT INTO stageq_tasks (id, process_id, execution_order, body, state, lease_token) VALUES (5, 9999, 100, 'SELECT 5', 'running', 7)`)
	exec(`INSERT INTO stageq_logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt, lease_token)
VALUES (5, 9999, 'gone', 100, 'sql', 'SELECT 5', 'w', 1, 7)`)

	if err := m.Migrate(15); err != nil {
		t.Fatalf("up to 15: %v", err)
	}
	wantStates(t, d, map[int64]string{1: "scheduled", 2: "available", 3: "blocked"})
	var orphans int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM stageq_tasks WHERE id = 5`).Scan(&orphans); err != nil || orphans != 0 {
		t.Fatalf("the task of a deleted process: %d left, %v; want it removed", orphans, err)
	}
	var outcome string
	if err := db.QueryRowContext(ctx, `SELECT outcome FROM stageq_logs WHERE task_id = 5`).Scan(&outcome); err != nil || outcome != "abandoned" {
		t.Fatalf("the removed task's open attempt: %q, %v; want it closed abandoned", outcome, err)
	}
	var id int64
	if err := db.QueryRowContext(ctx, `INSERT INTO stageq_tasks (process_id, execution_order, body, state)
SELECT id, 200, 'SELECT 4', 'blocked' FROM stageq_processes WHERE name = 'p' RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if id <= 90 {
		t.Fatalf("a task inserted after the migration got id %d: ids up to 90 were given out before it", id)
	}
	var indexes int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'stageq_tasks' AND sql IS NOT NULL`).Scan(&indexes); err != nil || indexes != 11 {
		t.Fatalf("stageq_tasks has %d indexes, %v; want the 10 of version 14 and stageq_tasks_due", indexes, err)
	}
	if floor, err := schemaFloor(ctx, db); err != nil || floor != 15 {
		t.Fatalf("floor %d, %v; want 15: a version-14 binary would claim delayed tasks early", floor, err)
	}

	if err := m.Migrate(14); err != nil {
		t.Fatalf("down to 14 again: %v", err)
	}
	wantStates(t, d, map[int64]string{1: "available", 2: "available", 3: "blocked", id: "blocked"})
	if floor, err := schemaFloor(ctx, db); err != nil || floor != 13 {
		t.Fatalf("floor after the down %d, %v; want 13", floor, err)
	}
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		t.Fatalf("up again: %v", err)
	}
	wantStates(t, d, map[int64]string{1: "scheduled", 2: "available", 3: "blocked", id: "blocked"})
}

func wantStates(t *testing.T, d dialect.Dialect, want map[int64]string) {
	t.Helper()
	for id, w := range want {
		var got string
		if err := d.DB().QueryRowContext(context.Background(), `SELECT state FROM stageq_tasks WHERE id = ?`, id).Scan(&got); err != nil {
			t.Fatalf("task %d: %v", id, err)
		}
		if got != w {
			t.Errorf("task %d is %s, want %s", id, got, w)
		}
	}
}

// claimIndexed counts the entries of stageq_tasks_claim.
func claimIndexed(t *testing.T, d dialect.Dialect) int {
	t.Helper()
	var n int
	if err := d.DB().QueryRowContext(context.Background(),
		`SELECT count(*) FROM stageq_tasks INDEXED BY stageq_tasks_claim WHERE state = 'available'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// claimIDs claims up to ten tasks under the lease token given.
func claimIDs(t *testing.T, d dialect.Dialect, token int64) []int64 {
	t.Helper()
	got, err := d.TaskClaim(context.Background(), dialect.ClaimParams{WorkerID: "w", Max: 10, Token: token, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, c := range got {
		ids = append(ids, c.ID)
	}
	return ids
}

// TestDueRetryTakesTheHeadsTurn: a retry that comes due is stamped with its
// priority's current virtual time, as PostgreSQL's claim stamps it, not left
// with the turn of its first attempt, which lies behind every task that
// waited meanwhile.
func TestDueRetryTakesTheHeadsTurn(t *testing.T) {
	ctx := context.Background()
	d := migrated(t)
	db := d.DB()
	tasks := make([]dialect.NewTask, 4)
	for i := range tasks {
		tasks[i] = dialect.NewTask{Order: 100, Kind: "sql", Body: fmt.Sprintf("SELECT %d", i), MaxAttempts: 3}
	}
	res, err := d.Submit(ctx, nil, dialect.SubmitParams{Process: "p", Tasks: tasks})
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w", Max: 1, Token: 1, Lease: time.Minute})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %v, %v", got, err)
	}
	var first int64
	if err := db.QueryRowContext(ctx, `SELECT vtime FROM stageq_tasks WHERE id = ?`, got[0].ID).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if err := d.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: got[0].ID, Token: 1, ProcessID: res.ProcessID,
		Outcome: dialect.OutcomeFailed, Error: "boom", RetryAfter: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	wantStates(t, d, map[int64]string{got[0].ID: "scheduled"})
	var head int64
	if err := db.QueryRowContext(ctx, `SELECT min(vtime) FROM stageq_tasks WHERE state = 'available'`).Scan(&head); err != nil {
		t.Fatal(err)
	}
	if head <= first {
		t.Fatalf("the head's turn %d is not after the first attempt's %d: the test shows nothing", head, first)
	}
	time.Sleep(100 * time.Millisecond)
	// The due step runs first; the claim then takes one task.
	if _, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w", Max: 1, Token: 2, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	var state string
	var vtime int64
	if err := db.QueryRowContext(ctx, `SELECT state, vtime FROM stageq_tasks WHERE id = ?`, got[0].ID).Scan(&state, &vtime); err != nil {
		t.Fatal(err)
	}
	// The claim took one task at the head: the due retry (stamped at the
	// head, and the lowest id there) or the task that was the head.
	if vtime != head {
		t.Errorf("the due retry's turn is %d (%s), want the head's %d; its first attempt's was %d", vtime, state, head, first)
	}
}

// TestDueTasksBecomeAvailableAThousandAClaim: a claim makes at most 1,000 due
// tasks available, each process's spaced by its stride from the head's turn;
// the next claim goes on with the rest.
func TestDueTasksBecomeAvailableAThousandAClaim(t *testing.T) {
	ctx := context.Background()
	d := migrated(t)
	db := d.DB()
	// Due one process after another, so that a claim's thousand are a's and b's.
	for i, p := range []string{"a", "b", "c"} {
		tasks := make([]dialect.NewTask, 500)
		for j := range tasks {
			tasks[j] = dialect.NewTask{Order: 100, Kind: "sql", Body: "SELECT 1", MaxAttempts: 3, Delay: time.Duration(50+20*i) * time.Millisecond}
		}
		if _, err := d.Submit(ctx, nil, dialect.SubmitParams{Process: p, Tasks: tasks}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(150 * time.Millisecond)
	count := func(state string) int {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM stageq_tasks WHERE state = ?`, state).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	claimIDs(t, d, 1)
	if s, a, r := count("scheduled"), count("available"), count("running"); s != 500 || a+r != 1000 {
		t.Fatalf("after one claim: %d scheduled, %d available, %d running; want 500 still scheduled", s, a, r)
	}
	claimIDs(t, d, 2)
	if s := count("scheduled"); s != 0 {
		t.Fatalf("after two claims %d tasks are still scheduled", s)
	}
	// The due step stamps a's and b's first tasks with the same head's turn;
	// submit had stamped b's after a's 500.
	var a0, b0 int64
	if err := db.QueryRowContext(ctx, `
SELECT (SELECT min(t.vtime) FROM stageq_tasks t JOIN stageq_processes p ON p.id = t.process_id WHERE p.name = 'a'),
       (SELECT min(t.vtime) FROM stageq_tasks t JOIN stageq_processes p ON p.id = t.process_id WHERE p.name = 'b')`).Scan(&a0, &b0); err != nil {
		t.Fatal(err)
	}
	if a0 != b0 {
		t.Errorf("a's first turn is %d, b's %d: want both stamped from the head's", a0, b0)
	}
	// Per process, the turns are distinct and a stride apart.
	var bad int
	if err := db.QueryRowContext(ctx, `
SELECT count(*) FROM (SELECT process_id, vtime - lag(vtime) OVER (PARTITION BY process_id ORDER BY vtime) AS gap
                        FROM stageq_tasks) WHERE gap IS NOT NULL AND gap <> 1000000`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Errorf("%d tasks are not a stride after their process's previous one", bad)
	}
}

// TestDueTaskOfADeletedProcessGoes: a due task whose process row was deleted
// by hand (foreign keys off) is removed by the claim, as PostgreSQL's claim
// removes it, also while a limit is defined (a claim under limits would never
// lease it, and available it would hold its priority's head for good).
func TestDueTaskOfADeletedProcessGoes(t *testing.T) {
	ctx := context.Background()
	d := migrated(t)
	db := d.DB()
	gone, err := d.Submit(ctx, nil, dialect.SubmitParams{Process: "gone", Tasks: []dialect.NewTask{
		{Order: 100, Kind: "sql", Body: "SELECT 1", MaxAttempts: 3, Delay: 50 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := d.Submit(ctx, nil, dialect.SubmitParams{Process: "kept", Tasks: []dialect.NewTask{
		{Order: 100, Kind: "sql", Body: "SELECT 2", MaxAttempts: 3, Delay: 50 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO stageq_limits (key, max_running) VALUES ('some-limit', 5)`); err != nil {
		t.Fatal(err)
	}
	orphan(t, db, `DELETE FROM stageq_processes WHERE name = 'gone'`)
	time.Sleep(100 * time.Millisecond)
	got := claimIDs(t, d, 1)
	if len(got) != 1 || got[0] != kept.TaskIDs[0] {
		t.Fatalf("claim took %v, want task %d", got, kept.TaskIDs[0])
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM stageq_tasks WHERE id = ?`, gone.TaskIDs[0]).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the due task of the deleted process: %d left, %v; want it removed", n, err)
	}
}

// orphan runs q on a connection with foreign keys off, as the sqlite3 shell
// has them, to leave a task without its process.
func orphan(t *testing.T, db *sql.DB, q string) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, s := range []string{"PRAGMA foreign_keys = OFF", q, "PRAGMA foreign_keys = ON"} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}
