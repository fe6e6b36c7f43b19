package bench

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"
)

// postgresBase is the server the bench's PostgreSQL tests create databases on.
func postgresBase() string {
	if v := os.Getenv("STAGEQ_POSTGRES_DSN"); v != "" {
		return v
	}
	return NewConfig().PostgresDSN
}

// openPostgres connects to the server; it must be running.
func openPostgres(t *testing.T, dsn string) *target {
	t.Helper()
	tg, err := openTarget(context.Background(), "postgres", dsn)
	if err != nil {
		t.Fatalf("PostgreSQL is not reachable (set STAGEQ_POSTGRES_DSN, or start it: "+
			"pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start): %v", err)
	}
	t.Cleanup(tg.close)
	return tg
}

// forEachLocalTarget runs fn as a subtest on each dialect that always runs
// here: SQLite in a temporary directory and the PostgreSQL server.
func forEachLocalTarget(t *testing.T, fn func(t *testing.T, tg *target)) {
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			if name == "postgres" {
				fn(t, openPostgres(t, postgresBase()))
				return
			}
			tg, err := openTarget(context.Background(), "sqlite", "")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(tg.close)
			fn(t, tg)
		})
	}
}

func TestParseProcStat(t *testing.T) {
	// A command name may hold spaces and parentheses; fields count from the last ')'.
	line := "4242 (post gres) (x)) S 1 4242 4242 0 -1 4194560 1200 0 0 0 317 42 0 0 20 0 1 0 99 1000 200 18446744073709551615\n"
	comm, ticks, err := parseProcStat(line)
	if err != nil || comm != "post gres) (x)" || ticks != 317+42 {
		t.Errorf("parseProcStat = %q, %d, %v; want \"post gres) (x)\", 359", comm, ticks, err)
	}
	if _, _, err := parseProcStat("4242 postgres S 1"); err == nil {
		t.Error("a line without a command name parsed")
	}
	if _, _, err := parseProcStat("4242 (postgres) S 1 2 3"); err == nil {
		t.Error("a short line parsed")
	}
	comm, _, err = procCPU(os.Getpid())
	if err != nil || comm == "" {
		t.Errorf("procCPU(self) = %q, %v", comm, err)
	}
}

func TestCPUSince(t *testing.T) {
	base := map[int]int64{1: 100, 2: 50}
	last := map[int]int64{1: 130, 2: 50, 3: 20} // 3 connected after the baseline
	if got, want := cpuSince(base, last), 500*time.Millisecond; got != want {
		t.Errorf("cpuSince = %v, want %v", got, want)
	}
}

// TestCostMeterPostgres measures known work on a database of its own: the
// transactions it commits and CPU its backend spends.
func TestCostMeterPostgres(t *testing.T) {
	ctx := context.Background()
	tg := openPostgres(t, postgresBase())
	dsn, drop, err := tg.createDB(ctx, "cost")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drop)
	r := &runner{cfg: NewConfig()}
	m := r.beginCost(ctx, tg, dbName(dsn))
	if m == nil || m.xErr != nil || m.cpuErr != nil {
		t.Fatalf("beginCost: %+v", m)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	m.startCPU(ctx)
	const commits = 20
	for i := 0; i < commits; i++ {
		if _, err := db.ExecContext(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	// About two megabytes of WAL: 10,000 rows of 100 bytes and their index
	// entries, inserted after the table's creation committed (with wal_level
	// minimal, rows written in the creating transaction skip the WAL).
	for _, q := range []string{
		"CREATE TABLE walcost (id int PRIMARY KEY, pad text)",
		"INSERT INTO walcost SELECT g, repeat('x', 100) FROM generate_series(1, 10000) g",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var sum int64 // enough work for the backend to show clock ticks
	if err := db.QueryRowContext(ctx, "SELECT sum(x)::bigint FROM generate_series(1, 3000000) x").Scan(&sum); err != nil {
		t.Fatal(err)
	}
	m.stopCPU(ctx)
	db.Close()
	c := m.end(ctx, 0)
	if !c.xactOK || c.xacts < commits+1 {
		t.Errorf("transactions: %+v, want at least %d", c, commits+1)
	}
	if !c.cpuOK || c.cpu <= 0 {
		t.Errorf("CPU: %+v, want some", c)
	}
	if !c.walOK || c.wal < 1_000_000 || c.wal > 100_000_000 {
		t.Errorf("WAL: %d bytes (ok %v), want 1 to 100 MB for 10,000 rows of 100 bytes and their index", c.wal, c.walOK)
	}
	// The bench's own statements are left out.
	if c2 := m.end(ctx, 5); c2.xacts != c.xacts-5 {
		t.Errorf("own transactions: %d, want %d", c2.xacts, c.xacts-5)
	}
}

func TestParseLSN(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
	}{
		{"0/0", 0},
		{"0/16B3748", 0x16B3748},
		{"1/0", 1 << 32},
		{"A/FFFFFFFF", 0xA<<32 | 0xFFFFFFFF},
	} {
		if got, err := parseLSN(c.in); err != nil || got != c.want {
			t.Errorf("parseLSN(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "16B3748", "x/1", "1/100000000"} {
		if _, err := parseLSN(bad); err == nil {
			t.Errorf("parseLSN(%q): no error", bad)
		}
	}
}
