package sqlite

import (
	"context"
	"os"
	"testing"
)

// TestWALFileShrinksAfterALargeTransaction: one transaction that writes far more
// than a checkpoint cycle (a large submission) must not leave the WAL file at
// its size for good: once a checkpoint has copied it back, the next write
// starts the log over and cuts the file to walSizeLimit. Claims and finishes
// ran slower beside a WAL file left at 126 MB (Open says how much).
func TestWALFileShrinksAfterALargeTransaction(t *testing.T) {
	d, path := migratedFile(t)
	db, ctx := d.DB(), context.Background()
	walSize := func() int64 {
		st, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	// About 40 MB of rows in one statement.
	if _, err := db.ExecContext(ctx, `
WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < 20000)
INSERT INTO stageq_tasks (process_id, execution_order, kind, body, state)
SELECT 1, 0, 'noop', hex(randomblob(1000)), 'blocked' FROM g`); err != nil {
		t.Fatal(err)
	}
	if got := walSize(); got <= 2*walSizeLimit {
		t.Fatalf("the large transaction left a WAL of %d bytes; the test needs more than %d", got, 2*walSizeLimit)
	}
	// Its commit ran the checkpoint; the next write starts the log over.
	if _, err := db.ExecContext(ctx, "DELETE FROM stageq_tasks WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if got := walSize(); got > walSizeLimit {
		t.Fatalf("WAL file %d bytes after the log started over, want at most %d", got, walSizeLimit)
	}
}
