package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stageq/stageq/dialect"
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

// TestDSNPragmasReplaceStageqs: a pragma the DSN sets replaces stageq's of the
// same name, whichever way the two would sort (the driver runs them sorted,
// so before, -1 lost to stageq's limit and 60000 won against 30000 by luck);
// the others keep stageq's values.
func TestDSNPragmasReplaceStageqs(t *testing.T) {
	ctx := context.Background()
	pragma := func(d interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}, name string) string {
		t.Helper()
		var v string
		if err := d.QueryRowContext(ctx, "PRAGMA "+name).Scan(&v); err != nil {
			t.Fatalf("PRAGMA %s: %v", name, err)
		}
		return v
	}
	path := filepath.Join(t.TempDir(), "queue.db")
	for _, c := range []struct {
		query string
		want  map[string]string
	}{
		{"", map[string]string{"journal_size_limit": "16777216", "busy_timeout": "30000", "synchronous": "1", "foreign_keys": "1", "journal_mode": "wal"}},
		{"?_pragma=journal_size_limit(-1)&_pragma=busy_timeout(60000)", map[string]string{"journal_size_limit": "-1", "busy_timeout": "60000", "synchronous": "1"}},
		{"?_pragma=JOURNAL_SIZE_LIMIT=0&_pragma=synchronous(FULL)", map[string]string{"journal_size_limit": "0", "busy_timeout": "30000", "synchronous": "2"}},
	} {
		d, err := Open(ctx, "sqlite://"+path+c.query)
		if err != nil {
			t.Fatalf("%q: %v", c.query, err)
		}
		s := d.(*SQLite)
		for name, want := range c.want {
			// Both pools: the queue's own connection and the bodies'.
			if got := pragma(s.db, name); got != want {
				t.Errorf("%q: queue connection: %s = %s, want %s", c.query, name, got, want)
			}
			if got := pragma(s.bodies, name); got != want {
				t.Errorf("%q: bodies' connection: %s = %s, want %s", c.query, name, got, want)
			}
		}
		d.Close()
	}
}

// TestDSNCannotTurnOffWhatTheQueueNeeds: a DSN that names journal_mode or
// foreign_keys with another value than the queue needs is refused as a bad
// DSN, before any file is opened; naming them with those values is allowed.
func TestDSNCannotTurnOffWhatTheQueueNeeds(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	// A bare name reads the pragma; it would also keep stageq's setting out.
	for _, q := range []string{"?_pragma=journal_mode(DELETE)", "?_pragma=journal_mode=memory", "?_pragma=foreign_keys(OFF)", "?_pragma=foreign_keys=0", "?_pragma=journal_mode"} {
		path := filepath.Join(dir, "refused.db")
		if d, err := Open(ctx, "sqlite://"+path+q); !errors.Is(err, dialect.ErrBadDSN) {
			if d != nil {
				d.Close()
			}
			t.Errorf("%q: err %v, want ErrBadDSN", q, err)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("%q: the refused DSN created %s (%v)", q, path, err)
		}
	}
	for _, q := range []string{"?_pragma=journal_mode(wal)", "?_pragma=foreign_keys=true&_pragma=JOURNAL_MODE = WAL"} {
		d, err := Open(ctx, "sqlite://"+filepath.Join(dir, "allowed.db")+q)
		if err != nil {
			t.Fatalf("%q: %v", q, err)
		}
		d.Close()
	}
}
