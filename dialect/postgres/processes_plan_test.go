package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/stages"
)

// TestClaimFinishAdvanceProbeProcessesByKey: statistics of Processes taken
// while it held one process (a new queue; the statistics autovacuum had before
// a burst of new processes) must not make a claim, a finish or a stage's end
// read every process. Routines version 4 joined each claimed task to Processes
// and the planner, seeing a table of a row or two, scanned it once per task
// (15,569 rows for 322 tasks over 100 processes, in a drain); finish_many's
// stage check tested every process against every (process, stage) of the
// batch; advance and open_stage scanned it for each process whose stage ended.
func TestClaimFinishAdvanceProbeProcessesByKey(t *testing.T) {
	ctx := context.Background()
	d := migratedDB(t)
	const procs, per = 200, 5
	const n = procs * per
	execSQL(t, d, `INSERT INTO stageq.processes (name, current_order) VALUES ('solo', NULL)`)
	analyzeOnce(t, d, "stageq.processes")
	addRunnable(t, d, procs, per)

	readsBefore := processRowsRead(t, d, nil)
	var claimed []dialect.ClaimedTask
	for len(claimed) < n {
		got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w", Max: 300, Token: 1, Lease: time.Minute})
		if err != nil || len(got) == 0 {
			t.Fatalf("claim: %d tasks after %d, %v", len(got), len(claimed), err)
		}
		claimed = append(claimed, got...)
	}
	var advance []int64
	for i := 0; i < n; i += 300 {
		var ps []dialect.FinishParams
		for _, c := range claimed[i:min(i+300, n)] {
			ps = append(ps, dialect.FinishParams{TaskID: c.ID, Token: c.Token, ProcessID: c.ProcessID, Outcome: dialect.OutcomeSucceeded})
		}
		res, err := d.(dialect.BatchFinisher).TaskFinishMany(ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		advance = append(advance, res.Advance...)
	}
	// Each process's stage ended with its last task: the advance that follows
	// the commit ends the process.
	busy, err := d.(dialect.StageAdvancer).StagesAdvance(ctx, advance)
	if err != nil || len(busy) != 0 {
		t.Fatalf("advance: busy %v, %v", busy, err)
	}
	// Every backend has reported once the tasks' counters show all of it, and
	// Processes' once its updates do (each process ended: one update each, or
	// more).
	waitStats(t, d, "stageq.tasks", "tasks_waiting", func(s tableStats) (bool, bool) {
		return s.Updated == n && s.Deleted == n, s.Updated > n || s.Deleted > n
	})
	r := processRowsRead(t, d, func(s tableStats) bool { return s.Updated >= procs }) - readsBefore
	var ended int
	if err := d.DB().QueryRowContext(ctx, `SELECT count(*) FROM stageq.processes WHERE name LIKE 'p%' AND state = 'succeeded'`).Scan(&ended); err != nil || ended != procs {
		t.Fatalf("%d processes succeeded, want %d (%v)", ended, procs, err)
	}
	t.Logf("process rows read to claim, finish and advance %d tasks: %d", n, r)
	// A probe per claimed task, one per (process, stage) of each finish batch
	// and a few per process whose stage ended: under 4n. A scan per task reads
	// procs rows each (version 4: over 180,000 here).
	if r > 4*n {
		t.Errorf("claiming, finishing and advancing %d tasks of %d processes read %d process rows, want at most %d (a key probe each)", n, procs, r, 4*n)
	}
}

// TestSubmitProbesProcessesByKey: as above, for submissions: each new process's
// submission looks it up by name and opens its stage by key, so a burst of P
// new processes reads O(P) process rows, not P × P.
func TestSubmitProbesProcessesByKey(t *testing.T) {
	ctx := context.Background()
	d := migratedDB(t)
	const procs = 200
	execSQL(t, d, `INSERT INTO stageq.processes (name, current_order) VALUES ('solo', NULL)`)
	analyzeOnce(t, d, "stageq.processes")

	before := processRowsRead(t, d, nil)
	for i := range procs {
		_, err := d.Submit(ctx, nil, dialect.SubmitParams{Process: fmt.Sprintf("q%d", i), Tasks: []stages.Resolved{
			{Order: 100, Kind: "sql", Body: "SELECT 1", MaxAttempts: 3},
			{Order: 200, Kind: "sql", Body: "SELECT 2", MaxAttempts: 3},
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	waitStats(t, d, "stageq.tasks", "tasks_waiting", func(s tableStats) (bool, bool) {
		return s.Inserted == 2*procs, s.Inserted > 2*procs
	})
	r := processRowsRead(t, d, nil) - before
	t.Logf("process rows read by %d submissions of new processes: %d", procs, r)
	// A few key probes per submission; a scan reads every process so far.
	if r > 20*procs {
		t.Errorf("%d submissions read %d process rows, want at most %d (key probes)", procs, r, 20*procs)
	}
}

// TestClaimLeavesOutATaskWithoutProcess: since migration 14 nothing but a
// hand-made DELETE can leave a task whose process row is gone. The claim must
// not fail on it (its Logs row would have no process name), which would stop
// every claim after it; it leaves it out, as the join of version 4 did, and
// leases the rest.
func TestClaimLeavesOutATaskWithoutProcess(t *testing.T) {
	ctx := context.Background()
	d := migratedDB(t)
	addRunnable(t, d, 2, 3)
	execSQL(t, d, `
INSERT INTO stageq.tasks (process_id, execution_order, body, state, run_at)
VALUES (-1, 100, 'SELECT 1', 'available', now() - interval '2 hours')`)
	got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w", Max: 10, Token: 1, Lease: time.Minute})
	if err != nil {
		t.Fatalf("claim beside a task without process: %v", err)
	}
	if len(got) != 6 {
		t.Fatalf("claimed %d tasks, want the 6 whose processes exist", len(got))
	}
	for _, c := range got {
		if c.ProcessID < 0 || c.Process == "" {
			t.Fatalf("claimed %+v", c)
		}
	}
}

// processRowsRead is how many rows of Processes scans have returned so far,
// sequential and by index, once ready (nil: at once) says its counters are in.
func processRowsRead(t *testing.T, d dialect.Dialect, ready func(tableStats) bool) int64 {
	t.Helper()
	return waitStats(t, d, "stageq.processes", "processes_pkey", func(s tableStats) (bool, bool) {
		return ready == nil || ready(s), false
	}).RowsRead
}
