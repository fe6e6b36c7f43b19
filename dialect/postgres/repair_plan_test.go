package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// TestRescueRepairsASliceOfOpenProcessesAPass: each rescue pass also repairs
// an open process whose stage ended without an advance (its last finish
// committed and its worker died before advancing). Routines version 6 examined
// every open process on every pass: 3.2 s a pass with 50,000 open processes,
// in each worker every heartbeat, and a pass that outlasts its timeout rolls
// back the leases it rescued. A pass now examines a slice of at most 1,000; a
// stage left behind is still found, by a later pass if not this one.
func TestRescueRepairsASliceOfOpenProcessesAPass(t *testing.T) {
	ctx := context.Background()
	d := migratedDB(t)
	const procs, slice = 5000, 1000
	addRunnable(t, d, procs, 1)
	// The stage of one process ended with no advance after it: its only task
	// is gone, and its process still shows stage 100 open.
	var stuck int64
	if err := d.DB().QueryRowContext(ctx, `
DELETE FROM stageq.tasks WHERE process_id = (SELECT id FROM stageq.processes WHERE name = 'p2500')
RETURNING process_id`).Scan(&stuck); err != nil {
		t.Fatal(err)
	}
	analyzeOnce(t, d, "stageq.processes")
	analyzeOnce(t, d, "stageq.tasks")

	before := settledStats(t, d, "stageq.processes", "processes_pkey").RowsRead
	if _, err := d.TaskRescueExpired(ctx, dialect.RescueParams{Max: 256}); err != nil {
		t.Fatal(err)
	}
	read := settledStats(t, d, "stageq.processes", "processes_pkey").RowsRead - before
	t.Logf("one rescue pass over %d open processes read %d process rows", procs, read)
	// The slice, and a few more to advance what it found.
	if read > slice+100 {
		t.Errorf("a rescue pass read %d process rows of %d open processes, want at most %d (a slice)", read, procs, slice+100)
	}

	// Each pass examines a slice from a random process on: a fifth of the
	// processes here, so 200 passes all miss it with a chance of 0.8^200.
	for pass := 1; ; pass++ {
		var state string
		if err := d.DB().QueryRowContext(ctx, `SELECT state FROM stageq.processes WHERE id = $1`, stuck).Scan(&state); err != nil {
			t.Fatal(err)
		}
		if state == "succeeded" {
			t.Logf("the stage left behind was repaired by pass %d", pass)
			return
		}
		if pass > 200 {
			t.Fatalf("after %d rescue passes the process whose stage ended is still %s", pass, state)
		}
		if _, err := d.TaskRescueExpired(ctx, dialect.RescueParams{Max: 256}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
}
