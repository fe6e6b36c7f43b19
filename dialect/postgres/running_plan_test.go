package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// TestBatchesProbeTasksByKeyWhateverTheStatistics: statistics gathered while no
// task ran (an idle queue, the state autovacuum usually samples) must not make
// a finish or a lease extension walk the running tasks. With state = 'running'
// beside the join, PostgreSQL read each batch through tasks_running, which such
// statistics show empty, and compared every running task with every task of the
// batch: 0.9 million comparisons for a batch of 300 beside 3,000 running.
func TestBatchesProbeTasksByKeyWhateverTheStatistics(t *testing.T) {
	ctx := context.Background()
	d := migratedDB(t)
	const n, batch = 3000, 300
	addRunnable(t, d, 1, n)
	analyzeOnce(t, d, "stageq.tasks") // nothing runs yet
	claimed := claimN(t, d, dialect.ClaimParams{WorkerID: "w", Max: n, Token: 1, Lease: time.Minute})

	// reads waits until the tasks' deletes and updates reach what this test
	// wrote and gives the index entries read through tasks_running.
	reads := func(deleted, updated int64) int64 {
		t.Helper()
		return waitStats(t, d, "stageq.tasks", "tasks_running", func(s tableStats) (bool, bool) {
			return s.Deleted == deleted && s.Updated == updated, s.Deleted > deleted || s.Updated > updated
		}).IndexRead
	}
	before := reads(0, n) // the claim updated each task once

	lease := func(c dialect.ClaimedTask) dialect.TaskLease { return dialect.TaskLease{ID: c.ID, Token: c.Token} }
	var all []dialect.TaskLease
	for _, c := range claimed {
		all = append(all, lease(c))
	}
	held, err := d.TaskExtendLeases(ctx, dialect.ExtendParams{WorkerID: "w", Tasks: all, Lease: time.Minute})
	if err != nil || len(held) != n {
		t.Fatalf("extend: %d of %d held, %v", len(held), n, err)
	}
	// Succeeded (deleted) and released (updated) alike, so that both of
	// finish_many's statements run beside many running tasks.
	released := 0
	for i := 0; i < n; i += batch {
		ps := make([]dialect.FinishParams, 0, batch)
		for j, c := range claimed[i : i+batch] {
			o := dialect.OutcomeSucceeded
			if j%10 == 0 {
				o = dialect.OutcomeReleased
				released++
			}
			ps = append(ps, dialect.FinishParams{TaskID: c.ID, Token: c.Token, ProcessID: c.ProcessID, Outcome: o})
		}
		res, err := d.(dialect.BatchFinisher).TaskFinishMany(ctx, ps)
		if err != nil {
			t.Fatal(err)
		}
		for k, h := range res.Held {
			if !h {
				t.Fatalf("task %d not held at its finish", ps[k].TaskID)
			}
		}
	}
	after := reads(int64(n-released), int64(2*n+released))
	// A probe by key reads no tasks_running entry; a walk reads every running
	// task at least once per statement (3,000 for the extension alone).
	r := after - before
	t.Logf("tasks_running entries read: %d", r)
	if r > 0 {
		t.Errorf("one extension and %d finishes read %d tasks_running entries, want none (a primary-key probe per task)", n/batch, r)
	}
}

// TestFinishRetestsATaskChangedUnderIt: finish_many tests the lease on the row
// it changes, so that a row another transaction changed while the finish
// waited for it is tested again in its newest version. Forced with the change
// held open in a transaction of its own while the finish waits, then
// committed: a rescue's change must make the finish report the lease lost and
// write nothing; a heartbeat's extension of the lease (a HOT update: the row
// moves within its page) must not. A version that changed rows by address got
// the second case wrong: the finish missed its still-held task, whose lease
// then ran out, and the task ran twice (TestNoDoubleClaim saw it).
func TestFinishRetestsATaskChangedUnderIt(t *testing.T) {
	changes := []struct {
		name, sql string
		held      bool
	}{
		{"rescued", `UPDATE stageq.tasks SET state = 'blocked', abandons = abandons + 1, worker_id = NULL, lease_token = NULL, lease_expires_at = NULL WHERE id = $1`, false},
		{"extended", `UPDATE stageq.tasks SET lease_expires_at = now() + interval '1 minute' WHERE id = $1`, true},
	}
	for _, ch := range changes {
		for _, outcome := range []dialect.Outcome{dialect.OutcomeSucceeded, dialect.OutcomeFailed} {
			t.Run(ch.name+"/"+string(outcome), func(t *testing.T) {
				ctx := context.Background()
				d := migratedDB(t)
				addRunnable(t, d, 1, 1)
				task := claimN(t, d, dialect.ClaimParams{WorkerID: "w", Max: 1, Token: 5, Lease: time.Minute})[0]

				other, err := d.DB().BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer other.Rollback()
				if _, err := other.ExecContext(ctx, ch.sql, task.ID); err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() {
					done <- d.TaskFinish(ctx, nil, dialect.FinishParams{TaskID: task.ID, Token: task.Token, Outcome: outcome, Error: "late"})
				}()
				waitFinishBlocked(t, d, done)
				if err := other.Commit(); err != nil {
					t.Fatal(err)
				}
				err = <-done

				var state string
				var lastError sql.NullString
				row := d.DB().QueryRowContext(ctx, `SELECT state, last_error FROM stageq.tasks WHERE id = $1`, task.ID)
				scanErr := row.Scan(&state, &lastError)
				switch {
				case !ch.held:
					if !errors.Is(err, dialect.ErrLeaseLost) {
						t.Fatalf("finish of a task rescued under it: %v, want ErrLeaseLost", err)
					}
					if scanErr != nil || state != "blocked" || lastError.Valid {
						t.Errorf("the rescued task: state %q, last_error %v (%v); want the rescue's blocked, none", state, lastError, scanErr)
					}
				case err != nil:
					t.Fatalf("finish of a task whose lease was extended under it: %v, want it recorded", err)
				case outcome == dialect.OutcomeSucceeded && !errors.Is(scanErr, sql.ErrNoRows):
					t.Errorf("the succeeded task is still there: state %q (%v)", state, scanErr)
				case outcome == dialect.OutcomeFailed && (scanErr != nil || state != "failed"):
					t.Errorf("the failed task: state %q (%v), want failed", state, scanErr)
				}
			})
		}
	}
}

// waitFinishBlocked waits until a finish of this database waits for a row
// lock; done is where the finish reports, should it end instead.
func waitFinishBlocked(t *testing.T, d dialect.Dialect, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting bool
		if err := d.DB().QueryRowContext(context.Background(), `
SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%finish%')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("the finish ended (%v) without waiting for the changed row", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the finish never waited for the row another transaction holds")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRescueAndBodyCheckProbeTasksByKey: as above, for the rescue of many
// expired attempts beside many running ones (one walk of the running tasks to
// find the expired, then a probe by key for each rescued task; before, a walk for
// each: 993,300 entries read here) and for the check a body makes before it
// starts when the worker cannot vouch for its lease (its old form walked
// tasks_running under psql's EXPLAIN, but not here: a guard only).
func TestRescueAndBodyCheckProbeTasksByKey(t *testing.T) {
	ctx := context.Background()
	d := migratedDB(t)
	const running, expired = 3000, 300
	addRunnable(t, d, 1, running+expired)
	analyzeOnce(t, d, "stageq.tasks") // nothing runs yet
	live := claimN(t, d, dialect.ClaimParams{WorkerID: "w", Max: running, Token: 1, Lease: time.Hour})
	claimN(t, d, dialect.ClaimParams{WorkerID: "gone", Max: expired, Token: 2, Lease: time.Millisecond})

	// The tasks_running entries read, once the counters settle: the rescue's
	// count of updates depends on its stage openings, so there is no exact
	// count to wait for. A report that came later could only make the test
	// pass wrongly, never fail.
	before := settledStats(t, d, "stageq.tasks", "tasks_running").IndexRead
	n, err := d.TaskRescueExpired(ctx, dialect.RescueParams{Max: 1000})
	if err != nil || n != expired {
		t.Fatalf("rescue: %d rescued, %v; want %d", n, err, expired)
	}
	conn, _, err := d.(dialect.BodySessioner).BodyConn(ctx, dialect.BodyStart{Lease: dialect.TaskLease{ID: live[0].ID, Token: live[0].Token}, Body: "SELECT 1"})
	if err != nil {
		t.Fatalf("body check of a held attempt: %v", err)
	}
	conn.Close()
	r := settledStats(t, d, "stageq.tasks", "tasks_running").IndexRead - before
	t.Logf("tasks_running entries read: %d", r)
	// The rescue's search reads each running task once (3,300); a walk per
	// rescued task would read about 3,300 more for each of the 300.
	if r > 2*(running+expired) {
		t.Errorf("a rescue of %d and a body check read %d tasks_running entries, want one walk of the %d running (a probe by key for each)", expired, r, running+expired)
	}
}
