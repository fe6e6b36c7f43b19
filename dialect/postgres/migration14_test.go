package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stageq/stageq/migrations"
)

// TestMigration14BesideAVersion13Worker: migration 14 locks Tasks and
// Processes while version-13 workers run (a rolling upgrade). Forced here: a
// worker's transaction holds a process row while the migration starts, and
// only then writes a task, as a finish that hands a task back does. Had the
// migration taken its locks one statement at a time, it would hold Tasks and
// wait for Processes while the worker held Processes and waited for Tasks,
// and PostgreSQL would end one of them; a migration ended half way leaves the
// version dirty. It must wait its turn instead: the worker's write succeeds,
// and the migration completes once the worker commits.
func TestMigration14BesideAVersion13Worker(t *testing.T) {
	ctx := context.Background()
	d := migratedDB(t)
	m, err := migrations.Migrator(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Migrate(13); err != nil {
		t.Fatalf("down to 13: %v", err)
	}
	execSQL(t, d, `INSERT INTO stageq.processes (name, current_order) VALUES ('p', 100)`)
	execSQL(t, d, `
INSERT INTO stageq.tasks (process_id, execution_order, body, state, run_at)
SELECT id, 100, 'SELECT 1', 'available', now() FROM stageq.processes WHERE name = 'p'`)

	worker, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Rollback()
	if _, err := worker.ExecContext(ctx, `SELECT 1 FROM stageq.processes WHERE name = 'p' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	up := make(chan error, 1)
	go func() { up <- m.Migrate(14) }()
	time.Sleep(1500 * time.Millisecond) // the migration has started and waits
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := worker.ExecContext(wctx, `UPDATE stageq.tasks SET state = 'blocked' WHERE process_id = (SELECT id FROM stageq.processes WHERE name = 'p')`); err != nil {
		t.Fatalf("the worker's write while the migration waited: %v", err)
	}
	select {
	case err := <-up:
		t.Fatalf("the migration ended (%v) while the worker held its process", err)
	default:
	}
	if err := worker.Commit(); err != nil {
		t.Fatalf("the worker's commit: %v", err)
	}
	select {
	case err := <-up:
		if err != nil {
			t.Fatalf("migration 14: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("migration 14 did not complete within 30 s of the worker's commit")
	}
	if v, dirty, err := m.Version(); err != nil || v != 14 || dirty {
		t.Fatalf("after the migration: version %d, dirty %v, %v; want 14, clean", v, dirty, err)
	}
	var n int
	if err := d.DB().QueryRowContext(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = 'stageq' AND indexname IN ('tasks_waiting', 'tasks_running')`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("indexes after the migration: %d, %v; want tasks_waiting and tasks_running", n, err)
	}
}
