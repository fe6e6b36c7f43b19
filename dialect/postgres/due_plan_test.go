package postgres_test

import (
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// TestClaimMakesDueTasksAvailableByKey: the claim's first step makes up to
// 1,000 due scheduled tasks available (retries whose backoff has passed,
// delayed tasks). Routines version 6 joined them to Processes and wrote them
// back with a join, and the planner (sorts and sequential scans off) read
// every process into the join and the whole tasks table into a hash: with
// 50,000 processes that each had one retry due, every claim took 2.5 s. Each
// due task's process must be a key probe, and each write-back a key probe,
// however many processes and tasks there are.
func TestClaimMakesDueTasksAvailableByKey(t *testing.T) {
	d := migratedDB(t)
	const procs, due = 10000, 1000 // the claim takes at most 1,000 due tasks at a time
	addRunnable(t, d, procs, 1)
	// Each process's task is a retry whose backoff has just passed.
	execSQL(t, d, `UPDATE stageq.tasks SET state = 'scheduled', run_at = now() - interval '1 minute'`)
	analyzeOnce(t, d, "stageq.processes")
	analyzeOnce(t, d, "stageq.tasks")
	procsBefore := settledStats(t, d, "stageq.processes", "processes_pkey")
	tasksBefore := settledStats(t, d, "stageq.tasks", "tasks_pkey")

	claimN(t, d, dialect.ClaimParams{WorkerID: "w", Max: 64, Token: 1, Lease: time.Minute})

	// due tasks made available, then 64 of them leased: one update each.
	tasks := waitStats(t, d, "stageq.tasks", "tasks_pkey", func(s tableStats) (bool, bool) {
		n := s.Updated - tasksBefore.Updated
		return n == due+64, n > due+64
	})
	procsRead := settledStats(t, d, "stageq.processes", "processes_pkey").RowsRead - procsBefore.RowsRead
	tasksRead := tasks.RowsRead - tasksBefore.RowsRead
	t.Logf("one claim with %d due tasks of %d processes read %d process rows and %d task rows", due, procs, procsRead, tasksRead)
	// A probe per due task, and per leased task for its name; a walk of the
	// table reads all procs, twice in version 6 (20,000 here).
	if procsRead > 2*due {
		t.Errorf("the claim read %d process rows for %d due tasks, want at most %d (a key probe each)", procsRead, due, 2*due)
	}
	// Each due task is read by the due scan and again to be written back,
	// and each leased one twice more: version 6 read all procs again to
	// write them back.
	if tasksRead > 3*due {
		t.Errorf("the claim read %d task rows for %d due tasks, want at most %d (key probes)", tasksRead, due, 3*due)
	}
}
