package conformance

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/migrations"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/routines"
	"github.com/stageq/stageq/stages"
)

// nextRelease is the release after this binary's, as its own build would
// bring it: one more table migration, which only adds a column (so the floor
// stays where it is), and, where the dialect keeps routines, the next routine
// version. Its routines are this binary's sources plus one more function:
// other sources, so another checksum, and a schema of their own.
func nextRelease(t *testing.T, db *testDB, floor int) dialect.Release {
	t.Helper()
	cur := db.D.Schema()
	want, err := migrations.Expected(cur)
	if err != nil {
		t.Fatal(err)
	}
	files := copyFS(t, cur.Files)
	next := want + 1
	add := map[string]string{
		"sqlite":    `ALTER TABLE stageq_tasks ADD COLUMN rolled_note TEXT;`,
		"postgres":  `ALTER TABLE stageq.tasks ADD COLUMN rolled_note text;`,
		"sqlserver": `ALTER TABLE stageq.Tasks ADD rolled_note nvarchar(50) NULL;`,
	}[db.Dialect]
	if floor > 0 {
		add += "\nUPDATE " + floorTable(db) + " SET oldest_binary = " + itoa(floor) + ";"
	}
	files[migrationName(next, "up")] = &fstest.MapFile{Data: []byte(add)}
	files[migrationName(next, "down")] = &fstest.MapFile{Data: []byte("SELECT 1;")}
	rel := dialect.Release{Migrations: files}
	if cur.Routines != nil {
		r := *cur.Routines
		src := copyFS(t, r.Files)
		src["99_release.sql"] = &fstest.MapFile{Data: []byte(map[string]string{
			"postgres":  `CREATE FUNCTION stageq_routines.release() RETURNS int LANGUAGE sql AS 'SELECT ` + itoa(r.Version+1) + `';`,
			"sqlserver": `CREATE PROCEDURE stageq_routines.Release AS BEGIN SET NOCOUNT ON; SELECT ` + itoa(r.Version+1) + ` AS release; END;`,
		}[db.Dialect])}
		r.Version++
		r.Files = src
		rel.Routines = &r
	}
	return rel
}

func floorTable(db *testDB) string {
	return map[string]string{"sqlite": "stageq_schema_floor", "postgres": "stageq.schema_floor", "sqlserver": "stageq.SchemaFloor"}[db.Dialect]
}

func migrationName(v uint, dir string) string {
	return strings.Repeat("0", 6-len(itoa(int(v)))) + itoa(int(v)) + "_next_release." + dir + ".sql"
}

func itoa(n int) string { return strconv.Itoa(n) }

func copyFS(t *testing.T, src fs.FS) fstest.MapFS {
	t.Helper()
	out := fstest.MapFS{}
	err := fs.WalkDir(src, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := fs.ReadFile(src, p)
		out[p] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// openRelease opens db's database as a binary of release rel would.
func openRelease(t *testing.T, db *testDB, rel dialect.Release) *testDB {
	t.Helper()
	ctx := context.Background()
	d, err := dialect.OpenRelease(ctx, db.DSN, rel)
	if err != nil {
		t.Fatal(err)
	}
	c, err := queue.New(ctx, d, queue.Config{Migrate: true})
	if err != nil {
		d.Close()
		t.Fatalf("release N+1: migrate: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &testDB{Dialect: db.Dialect, DSN: db.DSN, Client: c, D: d, Babelfish: db.Babelfish}
}

// TestRollingUpgrade: release N's workers (this binary) drain a staged
// process; meanwhile release N+1 migrates the tables (it only adds) and
// installs its routines beside N's, and its workers join (the process is
// paused from the first stage's end until they are up, so that both releases
// get tasks). Both releases claim
// and finish tasks of the same process on the same rows, each through its own
// routines; a release-N worker that restarts after the upgrade is admitted;
// every task runs once, and no stage starts before the one below it ended.
// Then, once N's workers stopped, pruning drops N's routines and keeps N+1's,
// which the SQL entry point (stageq.enqueue) then calls.
func TestRollingUpgrade(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		cfg := fastConfig()
		cfg.Concurrency = 2
		cfg.ID = "release-n"
		oldPool := startWorkers(t, db, 2, cfg, nil)
		orders := []int{100, 200, 300, 400, 500}
		perStage := 12
		db.submit(t, plan("rolling", "sql", orders, sameBody(db.sleepSQL(0.03)), perStage))
		succeeded := func() int {
			return countOutcome(db.logs(t, dialect.LogFilter{Process: "rolling"}), dialect.OutcomeSucceeded)
		}
		waitFor(t, 60*time.Second, "release N to finish a first stage", func() bool { return succeeded() >= perStage })
		// Held until release N+1's workers are up: else release N's may drain
		// the rest while N+1 opens (a slow migration under -race), and N+1
		// would never get a task. Release N's running tasks finish meanwhile.
		op := limOperator(t, db)
		if err := op.ProcessSetPaused(ctx, "rolling", true); err != nil {
			t.Fatal(err)
		}

		if db.Dialect == "postgres" {
			// A role allowed into schema stageq (here every role) may use the
			// next release's routines too.
			db.exec(t, "GRANT USAGE ON SCHEMA stageq TO PUBLIC")
		}
		next := openRelease(t, db, nextRelease(t, db, 0))
		if db.Dialect == "postgres" {
			ns := next.D.Schema().Routines.Namespace()
			if n := db.count(t, `SELECT count(*) FROM pg_namespace n CROSS JOIN LATERAL aclexplode(n.nspacl) a
				WHERE n.nspname = '`+ns+`' AND a.grantee = 0 AND a.privilege_type = 'USAGE'`); n != 1 {
				t.Errorf("schema %s: PUBLIC's USAGE on stageq was not copied", ns)
			}
		}
		restarted, err := queue.Open(ctx, db.DSN, queue.Config{})
		if err != nil {
			t.Fatalf("a release-N worker restarting on release N+1's schema was refused: %v", err)
		}
		restarted.Close()
		cfg.ID = "release-n1"
		newPool := startWorkers(t, next, 2, cfg, nil)
		if err := op.ProcessSetPaused(ctx, "rolling", false); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "release N+1's workers to run tasks", func() bool {
			for _, e := range db.logs(t, dialect.LogFilter{Process: "rolling"}) {
				if strings.HasPrefix(e.WorkerID, "release-n1") && e.Outcome == dialect.OutcomeSucceeded {
					return true
				}
			}
			return false
		})
		oldPool.stop() // the last release-N workers are restarted as N+1
		waitFor(t, 90*time.Second, "the process to drain", func() bool { return succeeded() >= len(orders)*perStage })
		newPool.stop()

		entries := db.logs(t, dialect.LogFilter{Process: "rolling"})
		byRelease := map[string]int{}
		once := map[int64]int{}
		for _, e := range entries {
			if e.Outcome != dialect.OutcomeSucceeded {
				continue
			}
			once[e.TaskID]++
			if strings.HasPrefix(e.WorkerID, "release-n1") {
				byRelease["N+1"]++
			} else {
				byRelease["N"]++
			}
		}
		if len(once) != len(orders)*perStage {
			t.Errorf("%d tasks succeeded, want %d", len(once), len(orders)*perStage)
		}
		for id, n := range once {
			if n != 1 {
				t.Errorf("task %d succeeded %d times", id, n)
			}
		}
		if byRelease["N"] == 0 || byRelease["N+1"] == 0 {
			t.Errorf("tasks run per release: %v; want both", byRelease)
		}
		if v := stages.CheckOrder(runs(entries)); len(v) > 0 {
			t.Errorf("stage order broken across releases: %v", v)
		}

		r := next.D.Schema().Routines
		if r == nil {
			return // SQLite: its logic is Go, versioned with the binary
		}
		dropped, err := routines.Prune(ctx, next.D.DB(), *r, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(dropped) != 1 || dropped[0] != r.Version-1 {
			t.Errorf("prune dropped %v; want release N's routines, version %d", dropped, r.Version-1)
		}
		if err := routines.Check(ctx, db.D.DB(), *db.D.Schema().Routines); !errors.Is(err, routines.ErrNotInstalled) {
			t.Errorf("release N's routines after the prune: %v; want ErrNotInstalled", err)
		}
		if err := routines.Check(ctx, next.D.DB(), *r); err != nil {
			t.Errorf("release N+1's routines after the prune: %v", err)
		}
		if db.Dialect == "postgres" {
			if n := db.count(t, `SELECT count(*) FROM pg_namespace WHERE nspname = '`+dialect.RoutineNamespace(r.Version-1)+`'`); n != 0 {
				t.Errorf("schema %s is still there", dialect.RoutineNamespace(r.Version-1))
			}
			db.exec(t, `SELECT stageq.enqueue('SELECT 1', 100, process => 'after-prune')`)
			if n := db.count(t, `SELECT count(*) FROM stageq.tasks t JOIN stageq.processes p ON p.id = t.process_id WHERE p.name = 'after-prune'`); n != 1 {
				t.Errorf("stageq.enqueue after the prune made %d tasks, want 1", n)
			}
		}
	})
}

// TestRoutinesInstallOnceAndRefuseOtherSources: installing is idempotent and
// safe from many migrators at once; a build whose routines differ under the
// same version number is refused, by install and by check.
func TestRoutinesInstallOnceAndRefuseOtherSources(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		r := db.D.Schema().Routines
		if r == nil {
			t.Skip("SQLite keeps its logic in Go: no routines to install")
		}
		ctx := context.Background()
		errs := make(chan error, 4)
		for range 4 {
			go func() { _, err := migrations.Up(ctx, db.D); errs <- err }()
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Errorf("concurrent migrate up: %v", err)
			}
		}
		if n := db.count(t, "SELECT count(*) FROM "+routinesTable(db)); n != 1 {
			t.Errorf("%d routine versions recorded, want 1", n)
		}
		forged := *r
		src := copyFS(t, r.Files)
		for p, f := range src {
			if strings.HasSuffix(p, ".sql") {
				f.Data = append(f.Data, []byte("\n-- edited without a new version\n")...)
				break
			}
		}
		forged.Files = src
		if err := routines.Install(ctx, db.D.DB(), forged); !errors.Is(err, routines.ErrChecksum) {
			t.Errorf("install of other sources under version %d: %v; want ErrChecksum", r.Version, err)
		}
		if err := routines.Check(ctx, db.D.DB(), forged); !errors.Is(err, routines.ErrChecksum) {
			t.Errorf("check of other sources under version %d: %v; want ErrChecksum", r.Version, err)
		}

		// Four migrators of a new version at once: one installs it, the
		// others find it under the lock and leave it.
		newer := *r
		newer.Version++
		for range 4 {
			go func() { errs <- routines.Install(ctx, db.D.DB(), newer) }()
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Errorf("concurrent install of version %d: %v", newer.Version, err)
			}
		}
		if n := db.count(t, "SELECT count(*) FROM "+routinesTable(db)); n != 2 {
			t.Errorf("%d routine versions recorded after installing %d, want 2", n, newer.Version)
		}

		// Another starting worker holds the shared lock: the version already
		// there is found beside it, and a new one waits for it.
		hold := holdRoutinesLock(t, db, r.SQL.LockShared)
		quick, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := routines.Install(quick, db.D.DB(), newer); err != nil {
			t.Fatalf("install of the version already there, the shared lock held elsewhere: %v", err)
		}
		newest := newer
		newest.Version++
		installWaitsFor(t, db, hold, newest, "the shared lock of a starting worker")

		// A prune in progress holds the lock: even the version already there
		// waits, so that it cannot be found by a read the prune then undoes.
		installWaitsFor(t, db, holdRoutinesLock(t, db, r.SQL.Lock), newer, "the lock of a prune in progress")
	})
}

func routinesTable(db *testDB) string {
	return db.table(map[string]string{"postgres": "routines", "sqlserver": "Routines"}[db.Dialect])
}

// holdRoutinesLock runs lock (RoutineSQL.Lock or LockShared) in a transaction
// it leaves open until the test ends or the caller rolls it back.
func holdRoutinesLock(t *testing.T, db *testDB, lock string) *sql.Tx {
	t.Helper()
	tx, err := db.D.DB().BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	if _, err := tx.ExecContext(context.Background(), lock); err != nil {
		t.Fatal(err)
	}
	return tx
}

// installWaitsFor shows that an install of r does not go past the lock hold
// keeps (held by what), and ends once hold is rolled back.
func installWaitsFor(t *testing.T, db *testDB, hold *sql.Tx, r dialect.Routines, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- routines.Install(context.Background(), db.D.DB(), r) }()
	select {
	case err := <-done:
		t.Fatalf("install of version %d went past %s: %v", r.Version, what, err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := hold.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("install of version %d once %s was let go: %v", r.Version, what, err)
	}
	if err := routines.Check(context.Background(), db.D.DB(), r); err != nil {
		t.Errorf("check of version %d after its install: %v", r.Version, err)
	}
}

// TestSchemaFloorRefusesOlderBinaries: a release whose migration takes
// something away raises the floor; this binary is then refused, at start and
// at migrate up, and the release that raised it runs.
func TestSchemaFloorRefusesOlderBinaries(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		want, err := migrations.Expected(db.D.Schema())
		if err != nil {
			t.Fatal(err)
		}
		next := openRelease(t, db, nextRelease(t, db, int(want)+1))
		if err := migrations.Check(ctx, next.D); err != nil {
			t.Errorf("the release that raised the floor: %v", err)
		}
		if _, err := queue.Open(ctx, db.DSN, queue.Config{}); !errors.Is(err, migrations.ErrNewer) {
			t.Errorf("this binary on a floor above it: %v; want ErrNewer", err)
		}
		if _, err := migrations.Up(ctx, db.D); !errors.Is(err, migrations.ErrNewer) {
			t.Errorf("migrate up by this binary on a floor above it: %v; want ErrNewer", err)
		}
	})
}

// TestMigrateUpAfterANewerReleaseMigrated: a binary's migrate up reads the
// database's version, and a newer release migrates past this binary's newest
// version before this binary's golang-migrate run reads it again (two
// workers of a rolling upgrade started with --migrate at once). The outcome
// is the one the binary would have had reading the newer version first: run
// where the newer release kept the floor, ErrNewer where it raised it.
// Before, golang-migrate's "no migration found" came back either way.
func TestMigrateUpAfterANewerReleaseMigrated(t *testing.T) {
	for _, raise := range []bool{false, true} {
		t.Run(map[bool]string{false: "floor kept", true: "floor raised"}[raise], func(t *testing.T) {
			forEachDialect(t, func(t *testing.T, db *testDB) {
				ctx := context.Background()
				want, err := migrations.Expected(db.D.Schema())
				if err != nil {
					t.Fatal(err)
				}
				floor := 0
				if raise {
					floor = int(want) + 1
				}
				rel := nextRelease(t, db, floor)
				racer := &migrateRacer{Dialect: db.D, between: func() { openRelease(t, db, rel) }}
				got, err := migrations.Up(ctx, racer)
				if !racer.raced {
					t.Fatal("the newer release did not migrate between the two reads")
				}
				switch {
				case raise && !errors.Is(err, migrations.ErrNewer):
					t.Errorf("migrate up after a newer release raised the floor: %v; want ErrNewer", err)
				case !raise && err != nil:
					t.Errorf("migrate up after a newer release that kept the floor: %v; want it admitted", err)
				case got != want+1:
					t.Errorf("migrate up says version %d; want %d, the newer release's", got, want+1)
				}
			})
		})
	}
}

// migrateRacer is a dialect whose first schema version read lets between run
// (another release migrating) after the read and before its answer returns.
type migrateRacer struct {
	dialect.Dialect
	between func()
	raced   bool
}

func (r *migrateRacer) Schema() dialect.Schema {
	s := r.Dialect.Schema()
	read := s.Version
	s.Version = func(ctx context.Context, db *sql.DB) (uint, bool, error) {
		v, dirty, err := read(ctx, db)
		if !r.raced {
			r.raced = true
			r.between()
		}
		return v, dirty, err
	}
	return s
}
