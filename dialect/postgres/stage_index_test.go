package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// TestStageReadsSeekWithoutTheRunningTasks: the stage index, tasks_waiting,
// leaves running tasks out so that a claim writes nothing there (migration
// 14). Every statement that asked it about a process's tasks whatever their
// state must now ask tasks_running for the running ones, or it reads the whole
// table: the lowest order left and the stage barrier (open_stage, advance and
// the rescue's pass over open processes), the configuration of a priority, the
// lower stages a waiting task names (queuectl why), a process's task list and
// stage counts (queuectl, the dashboard), and the prune of an empty process.
// None may scan Tasks.
func TestStageReadsSeekWithoutTheRunningTasks(t *testing.T) {
	ctx := context.Background()
	d := migratedDB(t)
	// One process in its first stage, 100 tasks running and 5 waiting for the
	// next stage, among 200 others that each wait with 100 tasks, so that the
	// table holds 100 times what the statements ask about and a scan is never
	// the cheaper plan. (Opening a stage of 100 tasks here, PostgreSQL rightly
	// prefers to scan the 20,000 rows once over 100 key probes.)
	const running, waiting, others = 100, 5, 200
	execSQL(t, d, `INSERT INTO stageq.processes (name, current_order) VALUES ('big', 100)`)
	execSQL(t, d, `
INSERT INTO stageq.tasks (process_id, execution_order, body, state, run_at)
SELECT p.id, 100, 'SELECT 1', 'available', now() - interval '1 hour'
  FROM stageq.processes p, generate_series(1, $1) WHERE p.name = 'big'`, running)
	execSQL(t, d, `
INSERT INTO stageq.tasks (process_id, execution_order, body, state, run_at)
SELECT p.id, 200, 'SELECT 1', 'blocked', now() FROM stageq.processes p, generate_series(1, $1) WHERE p.name = 'big'`, waiting)
	// The others' open stages hold a task not yet due, for the rescue's pass
	// over open processes to test; an empty process, ended long ago, is for
	// the prune.
	execSQL(t, d, `
INSERT INTO stageq.processes (name, current_order) SELECT 'other' || g, 100 FROM generate_series(1, $1) g`, others)
	execSQL(t, d, `
INSERT INTO stageq.tasks (process_id, execution_order, body, state, run_at)
SELECT p.id, 100, 'SELECT 1', 'scheduled', now() + interval '1 day' FROM stageq.processes p WHERE p.name LIKE 'other%'`)
	execSQL(t, d, `
INSERT INTO stageq.tasks (process_id, execution_order, body, state, run_at)
SELECT p.id, 200, 'SELECT 1', 'blocked', now() FROM stageq.processes p, generate_series(1, 99) WHERE p.name LIKE 'other%'`)
	execSQL(t, d, `
INSERT INTO stageq.processes (name, state, current_order, finished_at) VALUES ('ended', 'succeeded', NULL, now() - interval '2 days')`)
	analyzeOnce(t, d, "stageq.tasks")

	claimed := claimN(t, d, dialect.ClaimParams{WorkerID: "w", Max: running, Token: 1, Lease: time.Hour})
	var blocked int64
	if err := d.DB().QueryRowContext(ctx, `
SELECT min(t.id) FROM stageq.tasks t JOIN stageq.processes p ON p.id = t.process_id
 WHERE p.name = 'big' AND t.state = 'blocked'`).Scan(&blocked); err != nil {
		t.Fatal(err)
	}

	before := settledStats(t, d, "stageq.tasks", "tasks_waiting")

	op, err := dialect.AsOperator(d)
	if err != nil {
		t.Fatal(err)
	}
	w, err := d.(dialect.Inspector).TaskWait(ctx, blocked, time.Minute)
	if err != nil {
		t.Fatalf("why: %v", err)
	}
	if w.LowerCount != running {
		t.Errorf("why: %d lower-stage tasks counted, want the %d running", w.LowerCount, running)
	}
	if tasks, err := d.TaskList(ctx, dialect.TaskFilter{Process: "big", Limit: 1000}); err != nil || len(tasks) != running+waiting {
		t.Errorf("task list of the process: %d tasks, %v; want %d", len(tasks), err, running+waiting)
	}
	if ps, err := op.ProcessList(ctx, dialect.ProcessFilter{Name: "big"}); err != nil || len(ps) != 1 || len(ps[0].Stages) != 2 {
		t.Errorf("status of the process: %+v, %v; want its two stages", ps, err)
	}
	if busy, err := d.(dialect.StageAdvancer).StagesAdvance(ctx, []int64{claimed[0].ProcessID}); err != nil || len(busy) > 0 {
		t.Fatalf("advance with the stage running: busy %v, %v", busy, err)
	}
	if n, err := d.TaskRescueExpired(ctx, dialect.RescueParams{Max: 1000}); err != nil || n != 0 {
		t.Fatalf("rescue: %d rescued, %v", n, err)
	}
	if n, err := d.(dialect.Pruner).PruneProcesses(ctx, dialect.PruneParams{Age: 24 * time.Hour, Batch: 100}); err != nil || n != 1 {
		t.Fatalf("prune: %d processes, %v; want the ended one", n, err)
	}
	prio := 5
	if err := op.ProcessConfigure(ctx, nil, "big", dialect.ProcessSettings{Priority: &prio}); err != nil {
		t.Fatalf("configure: %v", err)
	}
	ps := make([]dialect.FinishParams, len(claimed))
	for i, c := range claimed {
		ps[i] = dialect.FinishParams{TaskID: c.ID, Token: c.Token, ProcessID: c.ProcessID, Outcome: dialect.OutcomeSucceeded}
	}
	res, err := d.(dialect.BatchFinisher).TaskFinishMany(ctx, ps)
	if err != nil {
		t.Fatalf("finish: %v", err)
	}
	if busy, err := d.(dialect.StageAdvancer).StagesAdvance(ctx, res.Advance); err != nil || len(busy) > 0 {
		t.Fatalf("advance after the stage ended: busy %v, %v", busy, err)
	}
	after := settledStats(t, d, "stageq.tasks", "tasks_waiting")

	var open int
	if err := d.DB().QueryRowContext(ctx, `
SELECT count(*) FROM stageq.tasks t JOIN stageq.processes p ON p.id = t.process_id
 WHERE p.name = 'big' AND p.current_order = 200 AND t.state = 'available' AND t.process_priority = 5`).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if open != waiting {
		t.Errorf("after the last finish of stage 100: %d of stage 200's %d tasks available at the new priority", open, waiting)
	}
	t.Logf("Tasks: %d sequential scans, %d tasks_waiting entries read", after.SeqScans-before.SeqScans, after.IndexRead-before.IndexRead)
	if n := after.SeqScans - before.SeqScans; n > 0 {
		t.Errorf("the stage reads scanned Tasks %d times, want none (each a seek on tasks_waiting or tasks_running)", n)
	}
}

// TestStageCheckStartsFromTheNewestWaitingTask: a finish asks whether its
// stage still has a waiting task. The tasks a stage has handed out keep their
// tasks_waiting entries, dead, until a scan or vacuum clears them, and they are
// mostly its oldest; read from the oldest, the check stepped over each of them
// first. Here 600 of a stage's 1,000 tasks are running when one of them
// finishes: the check must find a waiting task at once.
func TestStageCheckStartsFromTheNewestWaitingTask(t *testing.T) {
	ctx := context.Background()
	d := migratedDB(t)
	const n, running = 1000, 600
	addRunnable(t, d, 1, n)
	execSQL(t, d, "ALTER TABLE stageq.tasks SET (autovacuum_enabled = off)")
	claimed := claimN(t, d, dialect.ClaimParams{WorkerID: "w", Max: running, Token: 1, Lease: time.Minute})
	reads := func(deleted int64) int64 {
		t.Helper()
		return waitStats(t, d, "stageq.tasks", "tasks_waiting", func(s tableStats) (bool, bool) {
			return s.Updated == running && s.Deleted == deleted, s.Updated > running || s.Deleted > deleted
		}).IndexRead
	}
	before := reads(0)
	c := claimed[0]
	res, err := d.(dialect.BatchFinisher).TaskFinishMany(ctx, []dialect.FinishParams{
		{TaskID: c.ID, Token: c.Token, ProcessID: c.ProcessID, Outcome: dialect.OutcomeSucceeded}})
	if err != nil || !res.Held[0] || len(res.Advance) != 0 {
		t.Fatalf("finish: %+v, %v (the stage has %d tasks waiting: nothing to advance)", res, err, n-running)
	}
	r := reads(1) - before
	t.Logf("tasks_waiting entries read by the stage check: %d", r)
	if r > 10 {
		t.Errorf("the stage check read %d tasks_waiting entries beside %d running tasks, want a few (the newest first)", r, running)
	}
}
