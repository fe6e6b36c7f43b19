package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// TestFinishSeeksLogsAfterAnEarlyAnalyze: statistics gathered while Logs held
// one row (a young database, analyzed by hand or by autovacuum) must not make
// each finish read the whole Logs table once it has grown. Before finish_many
// and rescue planned with sequential scans off, PostgreSQL chose a hash join
// over a scan of Logs here, and every completion got slower as Logs grew
// (the depth/blocked-large scenario of make bench).
func TestFinishSeeksLogsAfterAnEarlyAnalyze(t *testing.T) {
	ctx := context.Background()
	d := migratedDB(t)
	addRunnable(t, d, 1, 30)
	claimed := claimN(t, d, dialect.ClaimParams{WorkerID: "w", Max: 30, Token: 1, Lease: time.Minute})
	execSQL(t, d, "ANALYZE stageq.logs") // Logs holds 30 rows in one page

	// counters waits until Logs' insert and update counts reach what this
	// test wrote and gives its sequential scans and the index entries read
	// through logs_task.
	counters := func(inserted, updated int64) (seq, viaIndex int64) {
		t.Helper()
		s := waitStats(t, d, "stageq.logs", "logs_task", func(s tableStats) (bool, bool) {
			return s.Inserted == inserted && s.Updated == updated, s.Inserted > inserted || s.Updated > updated
		})
		if err := d.DB().QueryRowContext(ctx, `SELECT seq_scan FROM pg_stat_user_tables WHERE relid = 'stageq.logs'::regclass`).Scan(&seq); err != nil {
			t.Fatal(err)
		}
		return seq, s.IndexRead
	}
	seqBefore, readBefore := counters(30, 0)

	// One transaction, so one backend and its cached plans: the first
	// finishes plan against the small Logs (PL/pgSQL keeps a generic plan
	// after five calls), the rest run after Logs has grown.
	tx, err := d.BeginTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	finish := func(c dialect.ClaimedTask) {
		t.Helper()
		if err := d.TaskFinish(ctx, tx, dialect.FinishParams{TaskID: c.ID, Token: c.Token, Outcome: dialect.OutcomeSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range claimed[:10] {
		finish(c)
	}
	if _, err := tx.ExecContext(ctx, `
INSERT INTO stageq.logs (task_id, process_id, process_name, execution_order, kind, body, worker_id, attempt, lease_token, outcome)
SELECT 1000000 + g, 0, 'older', 100, 'sql', 'SELECT 1', 'w', 1, g, 'succeeded' FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	for _, c := range claimed[10:] {
		finish(c)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	seqAfter, readAfter := counters(20030, 30)
	if n := seqAfter - seqBefore; n > 0 {
		t.Errorf("30 finishes scanned Logs sequentially %d times, want none (each should seek logs_task)", n)
	}
	// A seek reads the one entry of its attempt; a full scan of the index
	// (a join the planner may pick instead) would read 20,030 per finish.
	if n := readAfter - readBefore; n > 300 {
		t.Errorf("30 finishes read %d entries of logs_task, want about 30 (one seek each)", n)
	}
}
