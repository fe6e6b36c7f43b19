package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stageq/stageq/dialect"
)

// TestRescueRepairsASliceOfOpenProcessesAPass: each rescue pass also repairs
// an open process whose stage ended without an advance (its last finish
// committed and its worker died before advancing). Routines version 6 examined
// every open process on every pass: 3.2 s a pass with 50,000 open processes,
// in each worker every heartbeat, and a pass that outlasts its timeout rolls
// back the leases it rescued. A pass now examines a slice of at most 1,000,
// the one after the slice its session examined last; so a stage left behind is
// found within (open processes / 1,000) passes of a session, wherever its key
// lies. The keys here have a gap, as in a queue that has made a million
// processes and keeps a few old ones open: a start drawn at random each pass
// would reach the stuck process about once in 1,000 passes.
func TestRescueRepairsASliceOfOpenProcessesAPass(t *testing.T) {
	d := migratedDB(t)
	const old, recent, slice = 10, 5000, 1000
	addRunnable(t, d, old, 1)
	execSQL(t, d, `SELECT setval(pg_get_serial_sequence('stageq.processes', 'id'), 1000000)`)
	execSQL(t, d, `
INSERT INTO stageq.processes (name, current_order)
SELECT 'q' || g, 100 FROM generate_series(1, $1) g`, recent)
	execSQL(t, d, `
INSERT INTO stageq.tasks (process_id, execution_order, body, state)
SELECT p.id, 100, 'SELECT 1', 'available' FROM stageq.processes p WHERE p.name LIKE 'q%'`)
	stuck := loseAdvance(t, d, "q4000")
	analyzeOnce(t, d, "stageq.processes")
	analyzeOnce(t, d, "stageq.tasks")

	before := settledStats(t, d, "stageq.processes", "processes_pkey").RowsRead
	rescuePass(t, d)
	read := settledStats(t, d, "stageq.processes", "processes_pkey").RowsRead - before
	t.Logf("one rescue pass over %d open processes read %d process rows", old+recent, read)
	// The slice, and a few more to advance what it found.
	if read > slice+100 {
		t.Errorf("a rescue pass read %d process rows of %d open processes, want at most %d (a slice)", read, old+recent, slice+100)
	}

	// Six passes of one session go round; a test's calls may come on a few
	// pooled sessions, each going round on its own.
	pass := 1
	for ; processState(t, d, stuck) != "succeeded"; pass++ {
		if pass >= 30 {
			t.Fatalf("after %d rescue passes the process whose stage ended is still %s", pass, processState(t, d, stuck))
		}
		rescuePass(t, d)
	}
	t.Logf("the stage left behind was repaired by pass %d", pass)
}

// TestRescueRepairsEveryLostAdvanceAmongFewOpenProcesses: with no more than
// 1,000 open processes a pass examines them all, wherever its slice starts.
func TestRescueRepairsEveryLostAdvanceAmongFewOpenProcesses(t *testing.T) {
	d := migratedDB(t)
	addRunnable(t, d, 900, 1)
	var stuck []int64
	for _, name := range []string{"p1", "p2", "p450", "p899", "p900"} {
		stuck = append(stuck, loseAdvance(t, d, name))
	}
	rescuePass(t, d)
	for i, id := range stuck {
		if s := processState(t, d, id); s != "succeeded" {
			t.Errorf("after one rescue pass, stuck process %d of %d is %s, want succeeded", i+1, len(stuck), s)
		}
	}
}

// TestRescueRepairsWhateverTheSessionSettingHolds: the place a session's
// passes have reached is a setting (stageq.repair_after) that anything else
// may have set first: a role's or a database's SET of the same name, a
// client's. Version 7 cast it to a number as it was, so text there failed
// every rescue pass of that session, leases and all. Now the pass starts at
// random instead, and still repairs.
func TestRescueRepairsWhateverTheSessionSettingHolds(t *testing.T) {
	d := migratedDB(t)
	addRunnable(t, d, 20, 1)
	// Each statement on a new session, which starts with the database's value.
	d.DB().SetMaxIdleConns(0)
	for i, v := range []string{"not a key", "-5", "99999999999999999999", "12abc"} {
		stuck := loseAdvance(t, d, fmt.Sprintf("p%d", i+1))
		execSQL(t, d, fmt.Sprintf(`DO $$ BEGIN EXECUTE format('ALTER DATABASE %%I SET stageq.repair_after = %%L', current_database(), '%s'); END $$`, v))
		rescuePass(t, d)
		if s := processState(t, d, stuck); s != "succeeded" {
			t.Errorf("with stageq.repair_after = %q, the pass left the process whose stage ended %s", v, s)
		}
	}
}

// loseAdvance deletes the one task of process name, as a finish that committed
// and whose worker died before the advance leaves it: its stage has ended and
// the process still shows it open. It returns the process's id.
func loseAdvance(t *testing.T, d dialect.Dialect, name string) int64 {
	t.Helper()
	var id int64
	if err := d.DB().QueryRowContext(context.Background(), `
DELETE FROM stageq.tasks WHERE process_id = (SELECT id FROM stageq.processes WHERE name = $1)
RETURNING process_id`, name).Scan(&id); err != nil {
		t.Fatalf("delete the task of %s: %v", name, err)
	}
	return id
}

func rescuePass(t *testing.T, d dialect.Dialect) {
	t.Helper()
	if _, err := d.TaskRescueExpired(context.Background(), dialect.RescueParams{Max: 256}); err != nil {
		t.Fatal(err)
	}
}

func processState(t *testing.T, d dialect.Dialect, id int64) string {
	t.Helper()
	var state string
	if err := d.DB().QueryRowContext(context.Background(), `SELECT state FROM stageq.processes WHERE id = $1`, id).Scan(&state); err != nil {
		t.Fatal(err)
	}
	return state
}
