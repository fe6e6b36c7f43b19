package sqlserver

// Tests that need a server: they run when STAGEQ_SQLSERVER_DSN is set (as the
// conformance suite does), each on a database of its own. They check what the
// statements tests can only read: the chunked statements touch every task, a
// long kind has a limit of its own, two migrators on an empty database both
// succeed, and the compatibility check lets a working database through.

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/internal/dialecttest"
	"github.com/stageq/stageq/internal/pgtest"
	"github.com/stageq/stageq/migrations"
	schema "github.com/stageq/stageq/migrations/sqlserver"
)

// newServerDB creates an empty database on the server of STAGEQ_SQLSERVER_DSN and
// drops it afterwards; it skips the test when the variable is not set.
func newServerDB(t *testing.T) (dsn string, babelfish bool) {
	t.Helper()
	base := os.Getenv("STAGEQ_SQLSERVER_DSN")
	if base == "" {
		t.Skip("STAGEQ_SQLSERVER_DSN is not set: no server")
	}
	admin := pgtest.Admin(t, "sqlserver", base)
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var version string
	if err := admin.QueryRowContext(ctx, "SELECT @@VERSION").Scan(&version); err != nil {
		t.Fatalf("server at %s: %v", dialect.Redact(base), err)
	}
	babelfish = strings.Contains(version, "Babelfish")
	name := pgtest.CreateDatabase(ctx, t, admin, "sqlserver", base, "stageq_d", func(name string) string {
		if babelfish { // no SINGLE_USER there
			return "DROP DATABASE " + name
		}
		return "ALTER DATABASE " + name + " SET SINGLE_USER WITH ROLLBACK IMMEDIATE; DROP DATABASE " + name
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("database", name)
	u.RawQuery = q.Encode()
	return u.String(), babelfish
}

// openMigrated opens the dialect on a fresh, migrated database.
func openMigrated(t *testing.T) (*SQLServer, bool) {
	t.Helper()
	dsn, babelfish := newServerDB(t)
	return dialecttest.Migrated(t, dsn).(*SQLServer), babelfish
}

// skipForBabelfishGap skips a test on Babelfish that a documented gap of
// Babelfish stops (docs/sqlserver.md, Babelfish), unless STAGEQ_BABELFISH_ALL=1
// says the gaps were worked around in a local copy of the migrations.
func skipForBabelfishGap(t *testing.T, babelfish bool, gap string) {
	t.Helper()
	if babelfish && os.Getenv("STAGEQ_BABELFISH_ALL") != "1" {
		t.Skip("Babelfish, not SQL Server: " + gap)
	}
}

// g9 is why every test that submits tasks skips on Babelfish.
const g9 = "stageq.StampDone raises the virtual clock with sys.sp_sequence_get_range, which Babelfish lacks (G9)"

// openForTasks opens the dialect on a fresh, migrated database that tasks can be
// submitted to: on Babelfish it skips the test (g9).
func openForTasks(t *testing.T) *SQLServer {
	t.Helper()
	d, babelfish := openMigrated(t)
	skipForBabelfishGap(t, babelfish, g9)
	return d
}

// submit submits sp on the pool; the test fails if it cannot.
func submit(t *testing.T, d *SQLServer, sp dialect.SubmitParams) dialect.SubmitResult {
	t.Helper()
	res, err := d.Submit(context.Background(), nil, sp)
	if err != nil {
		t.Fatalf("submit %d tasks to %q: %v", len(sp.Tasks), sp.Process, err)
	}
	return res
}

func stateCounts(t *testing.T, db *sql.DB, process string) map[string]int {
	t.Helper()
	rows, err := db.Query(`SELECT CONCAT(state, N'@', execution_order), COUNT(*) FROM stageq.Tasks
	                        WHERE process_name = @p1 GROUP BY state, execution_order`, process)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out[k] = n
	}
	return out
}

func tasksOf(n, order int, kind string) []dialect.NewTask {
	ts := make([]dialect.NewTask, n)
	for i := range ts {
		ts[i] = dialect.NewTask{Order: order, Kind: kind, Body: fmt.Sprintf("SELECT %d", i), MaxAttempts: 3}
	}
	return ts
}

// TestServerLargeStagesAreChunkedWhole: Submit inserts 1,000 tasks per statement
// and OpenStage re-states a stage 1,000 tasks at a time; every task must still be
// inserted, in order, and every task of a stage must change state together.
func TestServerLargeStagesAreChunkedWhole(t *testing.T) {
	d := openForTasks(t)
	ctx := context.Background()

	res := submit(t, d, dialect.SubmitParams{Process: "big", Tasks: tasksOf(2500, 1, "sql")})
	if len(res.TaskIDs) != 2500 {
		t.Fatalf("submit 2,500 returned %d ids", len(res.TaskIDs))
	}
	for i := 1; i < len(res.TaskIDs); i++ {
		if res.TaskIDs[i] <= res.TaskIDs[i-1] {
			t.Fatalf("task ids out of order at %d: %d after %d", i, res.TaskIDs[i], res.TaskIDs[i-1])
		}
	}
	if got := stateCounts(t, d.DB(), "big"); got["available@1"] != 2500 || len(got) != 1 {
		t.Fatalf("after the first submission: %v, want 2,500 available at order 1", got)
	}

	// A lower order arrives: the 2,500 tasks of order 1 wait again (three chunks).
	submit(t, d, dialect.SubmitParams{Process: "big", Tasks: tasksOf(1200, 0, "sql")})
	if got := stateCounts(t, d.DB(), "big"); got["blocked@1"] != 2500 || got["available@0"] != 1200 || len(got) != 2 {
		t.Fatalf("after a lower order arrived: %v, want 2,500 blocked at 1 and 1,200 available at 0", got)
	}

	// Order 0 goes away under the process lock; OpenStage opens all of order 1.
	_, err := d.DB().ExecContext(ctx, `
SET XACT_ABORT ON;
BEGIN TRANSACTION;
DECLARE @Id bigint;
SELECT @Id = id FROM stageq.Processes WITH (UPDLOCK, ROWLOCK) WHERE name = N'big';
DELETE FROM stageq.Tasks WHERE process_id = @Id AND execution_order = 0;
EXEC `+Routines().Namespace()+`.OpenStage @ProcessId = @Id;
COMMIT TRANSACTION;`)
	if err != nil {
		t.Fatalf("open order 1: %v", err)
	}
	if got := stateCounts(t, d.DB(), "big"); got["available@1"] != 2500 || len(got) != 1 {
		t.Fatalf("after order 0 went: %v, want 2,500 available at order 1", got)
	}
}

// TestServerScheduleStampsEveryTask: the tick's tasks are stamped 1,000 per
// statement; all of them must carry the schedule.
func TestServerScheduleStampsEveryTask(t *testing.T) {
	d := openForTasks(t)
	ctx := context.Background()
	res := submit(t, d, dialect.SubmitParams{Process: "tick", Tasks: tasksOf(2100, 0, "sql")})
	var id int64
	var next time.Time
	err := d.DB().QueryRowContext(ctx, `
INSERT INTO stageq.Schedules (name, interval_ms, [plan], next_run)
OUTPUT inserted.id, inserted.next_run
VALUES (N'nightly', 60000, N'{}', '2020-01-01T00:00:00');`).Scan(&id, &next)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := d.BeginTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	err = d.ScheduleFire(ctx, tx, dialect.ScheduleFireParams{
		ScheduleID: id, ScheduleName: "nightly", WorkerID: "w1", ScheduledFor: next,
		Outcome: dialect.RunEnqueued, ProcessID: res.ProcessID, TaskIDs: res.TaskIDs,
		Advance: true, PrevNextRun: next, NextRun: next.Add(time.Minute),
	})
	if err != nil {
		t.Fatalf("fire: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var stamped, count int
	if err := d.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM stageq.Tasks WHERE schedule_name = N'nightly'`).Scan(&stamped); err != nil {
		t.Fatal(err)
	}
	if err := d.DB().QueryRowContext(ctx, `SELECT task_count FROM stageq.ScheduleRuns WHERE schedule_id = @p1`, id).Scan(&count); err != nil {
		t.Fatal(err)
	}
	if stamped != 2100 || count != 2100 {
		t.Fatalf("stamped %d tasks, run records %d; want 2,100 both", stamped, count)
	}
}

// TestServerLongKindsHaveLimitsOfTheirOwn: two 200-character kinds that share
// their first 195 characters; a limit of 0 on one must not hold back the other.
func TestServerLongKindsHaveLimitsOfTheirOwn(t *testing.T) {
	d := openForTasks(t)
	ctx := context.Background()
	kindA := strings.Repeat("k", 195) + "aaaaa"
	kindB := strings.Repeat("k", 195) + "bbbbb"
	if err := d.LimitSet(ctx, "kind:"+kindA, 0); err != nil {
		t.Fatalf("limit on a 200-character kind: %v", err)
	}
	submit(t, d, dialect.SubmitParams{Process: "p", Tasks: []dialect.NewTask{
		{Order: 0, Kind: kindA, Body: "a", MaxAttempts: 3}, {Order: 0, Kind: kindB, Body: "b", MaxAttempts: 3},
	}})
	got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w1", Max: 10, Token: 1, Lease: time.Minute})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if len(got) != 1 || got[0].Kind != kindB {
		kinds := make([]string, len(got))
		for i, c := range got {
			kinds[i] = c.Kind[195:]
		}
		t.Fatalf("claimed kinds ending %v, want only the one ending bbbbb", kinds)
	}
	l, err := d.LimitGet(ctx, "kind:"+kindA)
	if err != nil || l.Max != 0 {
		t.Fatalf("limit kind:%s...: %+v, %v", kindA[:10], l, err)
	}
}

// TestServerTwoMigratorsOnAnEmptyDatabase: two `worker --migrate` starting at
// once on a database without schema stageq both succeed (the schema is created
// under an application lock, so the second never meets error 2714).
func TestServerTwoMigratorsOnAnEmptyDatabase(t *testing.T) {
	ctx := context.Background()
	want, err := migrations.Expected(dialect.Schema{Files: schema.Files})
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 3; round++ {
		dsn, _ := newServerDB(t)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		versions := make([]uint, 2)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := Open(ctx, dsn)
				if err != nil {
					errs[i] = err
					return
				}
				defer d.Close()
				versions[i], errs[i] = migrations.Up(ctx, d)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: migrator %d: %v", round, i, err)
			}
			if versions[i] != want {
				t.Fatalf("round %d: migrator %d ended at version %d, want %d", round, i, versions[i], want)
			}
		}
	}
}

// TestServerLongStatementOutlivesConnectionTimeout: "connection timeout" bounds
// the login only; a statement running longer than it must not be cut off.
func TestServerLongStatementOutlivesConnectionTimeout(t *testing.T) {
	dsn, babelfish := newServerDB(t)
	ctx := context.Background()
	d, err := Open(ctx, dsn+"&connection+timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	sleep := "WAITFOR DELAY '00:00:03';"
	if babelfish { // no WAITFOR there
		sleep = "DECLARE @slept varchar(1) = CAST(pg_sleep(3) AS varchar(1));"
	}
	start := time.Now()
	if _, err := d.DB().ExecContext(ctx, sleep); err != nil {
		t.Fatalf("a 3 s statement with connection timeout=1 failed after %s: %v", time.Since(start), err)
	}
}

// TestServerFinishManyMixedOutcomes: one FinishMany batch with every kind of
// result — a success, a retry, a final failure, a release, and a token that no
// longer holds — changes each task as PostgreSQL's finish_many does, marks the
// process failed in the same transaction, and reports no advance while tasks of
// the stage are left waiting.
func TestServerFinishManyMixedOutcomes(t *testing.T) {
	d, babelfish := openMigrated(t)
	// Seen failing there: "missing FROM-clause entry for table tasks".
	skipForBabelfishGap(t, babelfish, g9+"; the hand-back UPDATE t ... OUTPUT ... INTO @Ended FROM stageq.Tasks AS t of stageq.FinishMany hits its gap G2")
	ctx := context.Background()
	submit(t, d, dialect.SubmitParams{Process: "mixed", Tasks: append(tasksOf(4, 1, "sql"), tasksOf(1, 2, "sql")...)})
	got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w", Max: 10, Token: 7, Lease: time.Minute})
	if err != nil || len(got) != 4 {
		t.Fatalf("claim: %d tasks, %v; want the 4 of order 1", len(got), err)
	}
	ps := []dialect.FinishParams{
		{TaskID: got[0].ID, Token: 7, Outcome: dialect.OutcomeSucceeded},
		{TaskID: got[1].ID, Token: 7, Outcome: dialect.OutcomeFailed, Error: "again", RetryAfter: time.Hour},
		{TaskID: got[2].ID, Token: 7, Outcome: dialect.OutcomeFailed, Error: "boom"},
		{TaskID: got[3].ID, Token: 7, Outcome: dialect.OutcomeReleased},
		{TaskID: got[3].ID + 1000, Token: 7, Outcome: dialect.OutcomeSucceeded}, // no such task
	}
	res, err := d.TaskFinishMany(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, true, true, true, false}; fmt.Sprint(res.Held) != fmt.Sprint(want) {
		t.Errorf("held %v, want %v", res.Held, want)
	}
	if len(res.Advance) != 0 {
		t.Errorf("advance %v; want none (tasks of stage 1 are left waiting)", res.Advance)
	}
	if got := stateCounts(t, d.DB(), "mixed"); got["scheduled@1"] != 1 || got["failed@1"] != 1 || got["available@1"] != 1 || got["blocked@2"] != 1 || len(got) != 4 {
		t.Errorf("states %v; want one scheduled, one failed, one available at 1 and one blocked at 2", got)
	}
	p, err := d.ProcessGet(ctx, "mixed")
	if err != nil || p.State != dialect.ProcessFailed {
		t.Errorf("process %+v, %v; want failed", p, err)
	}
	// The same results again: no token holds any more.
	res, err = d.TaskFinishMany(ctx, ps[:1])
	if err != nil || res.Held[0] {
		t.Errorf("finishing a finished task again: held %v, %v", res.Held, err)
	}
}

// TestServerWeightsInterleave: tasks of a weight-3 process take three turns to a
// weight-1 process's one, in one claim; equal weights alternate.
func TestServerWeightsInterleave(t *testing.T) {
	d := openForTasks(t)
	ctx := context.Background()
	three := 3
	submit(t, d, dialect.SubmitParams{Process: "heavy", Tasks: tasksOf(6, 0, "sql"),
		Settings: &dialect.ProcessSettings{Weight: &three}})
	submit(t, d, dialect.SubmitParams{Process: "light", Tasks: tasksOf(6, 0, "sql")})
	got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "w", Max: 8, Token: 1, Lease: time.Minute})
	if err != nil || len(got) != 8 {
		t.Fatalf("claim: %d, %v", len(got), err)
	}
	n := map[string]int{}
	for _, c := range got {
		n[c.Process]++
	}
	if n["heavy"] != 6 || n["light"] != 2 {
		t.Errorf("claimed %v; want heavy 6 and light 2 (weight 3 to 1, heavy's backlog stamped first)", n)
	}
}
