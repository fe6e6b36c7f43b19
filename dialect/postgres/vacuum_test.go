package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/dialect/postgres"
	"github.com/stageq/stageq/internal/pgtest"
)

// vacuumCount is how many vacuums the server has counted on stageq.tasks
// (not autovacuum's).
func vacuumCount(t *testing.T, d dialect.Dialect) int64 {
	t.Helper()
	var n int64
	if err := d.DB().QueryRow(`SELECT vacuum_count FROM pg_stat_user_tables WHERE schemaname = 'stageq' AND relname = 'tasks'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestVacuumTasksDoesNotWaitForAnotherVacuum: while another session holds
// the lock a vacuum takes (SHARE UPDATE EXCLUSIVE: another vacuum, an index
// build), VacuumTasks returns at once having done nothing; once it is free,
// VacuumTasks vacuums.
func TestVacuumTasksDoesNotWaitForAnotherVacuum(t *testing.T) {
	d := migratedDB(t)
	tv := d.(dialect.TaskVacuumer)
	ctx := context.Background()
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `LOCK stageq.tasks IN SHARE UPDATE EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	before := vacuumCount(t, d)
	// Bounded, so that a vacuum that waited for the lock fails here rather
	// than hanging the test.
	bounded, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := tv.VacuumTasks(bounded); err != nil {
		t.Fatalf("VacuumTasks beside a held lock: %v; want it to return at once, skipping", err)
	}
	if n := vacuumCount(t, d); n != before {
		t.Fatalf("vacuum_count %d -> %d while the lock was held; want the vacuum skipped", before, n)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := tv.VacuumTasks(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for vacuumCount(t, d) == before {
		if time.Now().After(deadline) {
			t.Fatal("the server never counted the vacuum run once the lock was free")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestVacuumTasksRefusesARoleThatMayNot: for a role that neither owns the
// table nor the database, PostgreSQL's VACUUM only warns; VacuumTasks says
// ErrVacuumNotAllowed instead of pretending.
func TestVacuumTasksRefusesARoleThatMayNot(t *testing.T) {
	ctx := context.Background()
	owner, dsn := migratedDSN(t, "stageq_vac")
	if err := owner.(dialect.TaskVacuumer).VacuumTasks(ctx); err != nil {
		t.Fatalf("the owner's vacuum: %v", err)
	}
	role := fmt.Sprintf("stageq_vac_%08x", rand.Uint32())
	if _, err := owner.DB().ExecContext(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // on a connection of its own, whatever order the cleanups run in
		if admin, err := sql.Open("pgx", pgtest.Base()); err == nil {
			if _, err := admin.Exec("DROP ROLE IF EXISTS " + role); err != nil {
				t.Errorf("drop role %s: %v", role, err)
			}
			admin.Close()
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	other, err := postgres.Open(ctx, u.String())
	if err != nil {
		t.Fatalf("connect as %s (this test needs the server to let a new role in, as trust auth on loopback does): %v", role, err)
	}
	defer other.Close()
	err = other.(dialect.TaskVacuumer).VacuumTasks(ctx)
	if !errors.Is(err, dialect.ErrVacuumNotAllowed) {
		t.Fatalf("VacuumTasks as a role that owns nothing: %v; want ErrVacuumNotAllowed", err)
	}
}
