package postgres

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stageq/stageq/internal/pgtest"
)

// TestSessionsOutliveAnIdleSessionTimeout: on a database whose sessions end
// after 300 ms idle (idle_session_timeout, PostgreSQL 14 and later), the
// queue's own sessions, which sit idle between a worker's statements, live
// on: a pooled connection of either pool answers from the same backend after
// a second's idleness, and the listener keeps its session and hears a
// notification. Before the sessions turned the timeout off, the first
// statement after the pause failed with SQLSTATE 57P05 (a claim, a
// heartbeat or a rescue in a worker).
func TestSessionsOutliveAnIdleSessionTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := pgtest.NewDatabase(t, "idle_session")
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	// One session for the admin's statements, opened before the database's
	// setting changes, so the timeout does not end it.
	ac, err := admin.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	var version int
	var database string
	if err := ac.QueryRowContext(ctx, "SELECT current_setting('server_version_num')::int, current_database()").Scan(&version, &database); err != nil {
		t.Fatal(err)
	}
	if version < 140000 {
		t.Skipf("PostgreSQL %d has no idle_session_timeout", version)
	}
	if _, err := ac.ExecContext(ctx, "ALTER DATABASE "+database+" SET idle_session_timeout = '300ms'"); err != nil {
		t.Fatal(err)
	}

	d, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := d.(*Postgres)
	defer p.Close()
	lctx, stopListening := context.WithCancel(ctx)
	defer stopListening()
	heard, err := p.Listen(lctx)
	if err != nil {
		t.Fatal(err)
	}
	pools := []struct {
		name string
		db   *sql.DB
	}{{"the queue's pool", p.db}, {"the body pool", p.bodies}}
	backend := func(db *sql.DB) (int, error) {
		var pid int
		err := db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid)
		return pid, err
	}
	before := make([]int, len(pools))
	for i, pool := range pools {
		if before[i], err = backend(pool.db); err != nil {
			t.Fatalf("%s: %v", pool.name, err)
		}
	}
	var idle, check string
	if err := p.bodies.QueryRowContext(ctx, "SELECT current_setting('idle_session_timeout'), current_setting('client_connection_check_interval')").Scan(&idle, &check); err != nil {
		t.Fatal(err)
	}
	if idle != "0" || check != "1s" {
		t.Errorf("a body session: idle_session_timeout %q, client_connection_check_interval %q; want 0 and 1s", idle, check)
	}
	var listener int
	if err := ac.QueryRowContext(ctx, `SELECT pid FROM pg_stat_activity
 WHERE datname = current_database() AND query LIKE 'LISTEN '||$1||'%'`, channel).Scan(&listener); err != nil {
		t.Fatalf("the listener's session: %v", err)
	}

	time.Sleep(time.Second) // over three idle-session timeouts

	for i, pool := range pools {
		after, err := backend(pool.db)
		if err != nil {
			t.Errorf("%s after a second idle: %v", pool.name, err)
		} else if after != before[i] {
			t.Errorf("%s after a second idle: backend %d, was %d (its session ended)", pool.name, after, before[i])
		}
	}
	var alive bool
	if err := ac.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", listener).Scan(&alive); err != nil {
		t.Fatal(err)
	}
	if !alive {
		t.Errorf("the listener's session (backend %d) ended while it waited", listener)
	}
	if _, err := ac.ExecContext(ctx, "NOTIFY "+channel); err != nil {
		t.Fatal(err)
	}
	select {
	case <-heard:
	case <-time.After(10 * time.Second):
		t.Error("the listener heard no notification")
	}
}
