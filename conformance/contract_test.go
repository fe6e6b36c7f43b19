package conformance

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/stages"
)

// TestDialectContract pins, method by method, what the dialect interfaces
// document (dialect/dialect.go, operate.go, schedule.go): the transaction a
// method runs in, the errors it returns and the fences it keeps. The tests
// beside it prove properties of the whole system; these say which method
// broke. Each subtest starts on a database of its own.
func TestDialectContract(t *testing.T) {
	for name, check := range map[string]func(*testing.T, *testDB){
		"Submit":                 contractSubmit,
		"TaskFinish":             contractTaskFinish,
		"TaskExtendLeases":       contractTaskExtendLeases,
		"ProcessConfigure":       contractProcessConfigure,
		"ProcessRetry":           contractProcessRetry,
		"LimitSet":               contractLimitSet,
		"Schedules":              contractSchedules,
		"ScheduleFire":           contractScheduleFire,
		"Leases":                 contractLeases,
		"TaskClaim":              contractTaskClaim,
		"TaskFinishMany":         contractTaskFinishMany,
		"TaskFinishManyPartly":   contractTaskFinishManyPartly,
		"TaskRescueExpired":      contractTaskRescueExpired,
		"TaskRescueOrphans":      contractTaskRescueOrphans,
		"Workers":                contractWorkers,
		"ProcessGet":             contractProcessGet,
		"ProcessList":            contractProcessList,
		"LogList":                contractLogList,
		"ProcessSetPaused":       contractProcessSetPaused,
		"ProcessCancel":          contractProcessCancel,
		"TaskOperations":         contractTaskOperations,
		"TaskOperationsOrphaned": contractTaskOperationsOrphaned,
		"LimitDelete":            contractLimitDelete,
		"Prune":                  contractPrune,
		"Where":                  contractWhere,
	} {
		t.Run(name, func(t *testing.T) {
			forEachDialect(t, func(t *testing.T, db *testDB) { check(t, db) })
		})
	}
}

// oneTask is the SubmitParams of one task (order 1, kind work, one attempt)
// of process.
func oneTask(process string) dialect.SubmitParams {
	return dialect.SubmitParams{Process: process, Tasks: []dialect.NewTask{{Order: 1, Kind: "work", Body: "x", MaxAttempts: 1}}}
}

// submitOneTask submits oneTask(process) on the pool (Dialect.Submit),
// failing the test on an error.
func submitOneTask(t *testing.T, db *testDB, process string) {
	t.Helper()
	if _, err := db.D.Submit(context.Background(), nil, oneTask(process)); err != nil {
		t.Fatal(err)
	}
}

// Submit runs in the caller's transaction, which decides; with none it
// commits by itself.
func contractSubmit(t *testing.T, db *testDB) {
	ctx := context.Background()
	tx, err := db.D.BeginTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sp := oneTask("c-submit")
	res, err := db.D.Submit(ctx, tx, sp)
	if err != nil || len(res.TaskIDs) != 1 {
		t.Fatalf("Submit in a transaction: %+v, %v", res, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.D.ProcessGet(ctx, "c-submit"); !errors.Is(err, dialect.ErrNotFound) {
		t.Fatalf("after the caller rolled back, ProcessGet = %v; want ErrNotFound (the process and its task went with it)", err)
	}
	if _, err := db.D.Submit(ctx, nil, sp); err != nil {
		t.Fatalf("Submit on the pool: %v", err)
	}
	tasks, err := db.D.TaskList(ctx, dialect.TaskFilter{Process: "c-submit"})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("after Submit on the pool: %d tasks, %v; want the one", len(tasks), err)
	}
}

// TaskFinish is fenced by the lease token, and in the caller's transaction
// its effect is the caller's to commit.
func contractTaskFinish(t *testing.T, db *testDB) {
	db.skipOnBabelfish(t, "no claim there (harness_test.go)")
	ctx := context.Background()
	submitOneTask(t, db, "c-finish")
	got := claimAll(t, db, 5, 1)
	task := got[0]
	state := func() string {
		tasks := db.tasks(t, dialect.TaskFilter{Process: "c-finish"})
		if len(tasks) == 0 {
			return "gone"
		}
		return tasks[0].State
	}
	done := dialect.FinishParams{TaskID: task.ID, Token: task.Token, Outcome: dialect.OutcomeSucceeded}
	wrong := done
	wrong.Token++
	if err := db.D.TaskFinish(ctx, nil, wrong); !errors.Is(err, dialect.ErrLeaseLost) {
		t.Fatalf("finish with another token: %v; want ErrLeaseLost", err)
	}
	if s := state(); s != dialect.StateRunning {
		t.Fatalf("after a fenced-off finish the task is %s; want running, unchanged", s)
	}
	tx, err := db.D.BeginTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.D.TaskFinish(ctx, tx, done); err != nil {
		t.Fatalf("finish in a transaction: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if s := state(); s != dialect.StateRunning {
		t.Fatalf("after the caller rolled its finish back the task is %s; want running", s)
	}
	if err := db.D.TaskFinish(ctx, nil, done); err != nil {
		t.Fatalf("finish on the pool: %v", err)
	}
	if err := db.D.TaskFinish(ctx, nil, done); !errors.Is(err, dialect.ErrLeaseLost) {
		t.Fatalf("a second finish of the same attempt: %v; want ErrLeaseLost", err)
	}
	logs := db.logs(t, dialect.LogFilter{Process: "c-finish"})
	if len(logs) != 1 || logs[0].Outcome != dialect.OutcomeSucceeded {
		t.Fatalf("Logs: %+v; want one succeeded run", logs)
	}
}

// TaskExtendLeases answers with the leases still held, and a wrong token is
// not one of them.
func contractTaskExtendLeases(t *testing.T, db *testDB) {
	db.skipOnBabelfish(t, "no claim there (harness_test.go)")
	ctx := context.Background()
	submitOneTask(t, db, "c-extend")
	got := claimAll(t, db, 9, 1)
	held, err := db.D.TaskExtendLeases(ctx, dialect.ExtendParams{WorkerID: "w", Lease: time.Minute, Tasks: []dialect.TaskLease{
		{ID: got[0].ID, Token: got[0].Token}, {ID: got[0].ID, Token: got[0].Token + 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || held[0] != (dialect.TaskLease{ID: got[0].ID, Token: got[0].Token}) {
		t.Fatalf("extend answered %+v; want only the lease held with its token", held)
	}
}

// ProcessConfigure: ErrNotFound for an unknown process, ErrInvalid for a bad
// setting, and in the caller's transaction the caller decides.
func contractProcessConfigure(t *testing.T, db *testDB) {
	ctx := context.Background()
	op := limOperator(t, db)
	two, zero := 2, 0
	if err := op.ProcessConfigure(ctx, nil, "c-nobody", dialect.ProcessSettings{Weight: &two}); !errors.Is(err, dialect.ErrNotFound) {
		t.Fatalf("configure an unknown process: %v; want ErrNotFound", err)
	}
	submitOneTask(t, db, "c-conf")
	if err := op.ProcessConfigure(ctx, nil, "c-conf", dialect.ProcessSettings{Weight: &zero}); !errors.Is(err, dialect.ErrInvalid) {
		t.Fatalf("configure weight 0: %v; want ErrInvalid", err)
	}
	weight := func() int {
		ps, err := op.ProcessList(ctx, dialect.ProcessFilter{Name: "c-conf", All: true})
		if err != nil || len(ps) != 1 {
			t.Fatalf("ProcessList: %+v, %v", ps, err)
		}
		return ps[0].Weight
	}
	before := weight()
	tx, err := db.D.BeginTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	five := 5
	if err := op.ProcessConfigure(ctx, tx, "c-conf", dialect.ProcessSettings{Weight: &five}); err != nil {
		t.Fatalf("configure in a transaction: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if w := weight(); w != before {
		t.Fatalf("weight %d after the caller rolled back; want %d", w, before)
	}
	if err := op.ProcessConfigure(ctx, nil, "c-conf", dialect.ProcessSettings{Weight: &five}); err != nil || weight() != 5 {
		t.Fatalf("configure on the pool: %v, weight %d; want 5", err, weight())
	}
}

// ProcessRetry and ProcessDiscard: ErrWrongState when nothing has failed.
func contractProcessRetry(t *testing.T, db *testDB) {
	ctx := context.Background()
	op := limOperator(t, db)
	submitOneTask(t, db, "c-retry")
	if _, err := op.ProcessRetry(ctx, "c-retry"); !errors.Is(err, dialect.ErrWrongState) {
		t.Fatalf("retry with nothing failed: %v; want ErrWrongState", err)
	}
	if _, err := op.ProcessDiscard(ctx, "c-retry"); !errors.Is(err, dialect.ErrWrongState) {
		t.Fatalf("discard with nothing failed: %v; want ErrWrongState", err)
	}
}

// LimitSet refuses what a limit cannot be (ErrInvalid); a process's limit
// needs the process (ErrNotFound); LimitGet reads back what was set,
// ErrNotFound for a key that has no limit and ErrInvalid for the empty key.
func contractLimitSet(t *testing.T, db *testDB) {
	ctx := context.Background()
	op := limOperator(t, db)
	for _, bad := range []struct {
		key string
		max int
	}{{"", 1}, {"c-lim", -1}, {"process:", 1}, {"kind:", 1}} {
		if err := op.LimitSet(ctx, bad.key, bad.max); !errors.Is(err, dialect.ErrInvalid) {
			t.Errorf("LimitSet(%q, %d) = %v; want ErrInvalid", bad.key, bad.max, err)
		}
	}
	if err := op.LimitSet(ctx, "process:c-nobody", 2); !errors.Is(err, dialect.ErrNotFound) {
		t.Errorf("limit of an unknown process: %v; want ErrNotFound", err)
	}
	// A kind limit of the longest kind: SQL Server's keys hold it; PostgreSQL's
	// and SQLite's keep 200 characters, and refuse it saying so, not with
	// the table's CHECK constraint.
	longKind := "kind:" + strings.Repeat("k", stages.MaxNameLength)
	err := op.LimitSet(ctx, longKind, 1)
	switch {
	case db.Dialect == "sqlserver" && err != nil:
		t.Errorf("a limit of a %d-character kind: %v", stages.MaxNameLength, err)
	case db.Dialect != "sqlserver" && (!errors.Is(err, dialect.ErrInvalid) || !strings.Contains(err.Error(), "kind of at most 195")):
		t.Errorf("a limit of a %d-character kind: %v; want ErrInvalid naming the longest kind that can have one", stages.MaxNameLength, err)
	}
	if err := op.LimitSet(ctx, "c-lim", 3); err != nil {
		t.Fatal(err)
	}
	if l, err := op.LimitGet(ctx, "c-lim"); err != nil || l.Key != "c-lim" || l.Max != 3 {
		t.Fatalf("LimitGet = %+v, %v; want c-lim, max 3", l, err)
	}
	if l, err := op.LimitGet(ctx, ""); !errors.Is(err, dialect.ErrInvalid) {
		t.Errorf("LimitGet(\"\") = %+v, %v; want ErrInvalid (not the first of all limits)", l, err)
	}
	for _, none := range []string{"c-none", "process:c-nobody", "kind:c-none"} {
		if l, err := op.LimitGet(ctx, none); !errors.Is(err, dialect.ErrNotFound) {
			t.Errorf("LimitGet(%q) = %+v, %v; want ErrNotFound", none, l, err)
		}
	}
}

// Schedules: ErrExists for a taken name; ErrNotFound for an unknown one;
// created in the caller's transaction, the caller decides.
func contractSchedules(t *testing.T, db *testDB) {
	ctx := context.Background()
	now, err := db.D.ClockNow(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := dialect.ScheduleCreateParams{Name: "c-sched", Interval: time.Hour, Plan: `{"stages":[{"order":1,"tasks":[{"body":"x"}]}]}`,
		Missed: dialect.MissedSkip, Grace: time.Minute, NextRun: now.Add(time.Hour)}
	tx, err := db.D.BeginTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.D.ScheduleCreate(ctx, tx, p); err != nil {
		t.Fatalf("create in a transaction: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if list, err := db.D.ScheduleList(ctx, dialect.ScheduleFilter{Name: "c-sched"}); err != nil || len(list) != 0 {
		t.Fatalf("after the caller rolled back: %+v, %v; want no schedule", list, err)
	}
	if _, err := db.D.ScheduleCreate(ctx, nil, p); err != nil {
		t.Fatal(err)
	}
	if _, err := db.D.ScheduleCreate(ctx, nil, p); !errors.Is(err, dialect.ErrExists) {
		t.Fatalf("create a taken name: %v; want ErrExists", err)
	}
	if err := db.D.ScheduleSetPaused(ctx, dialect.SchedulePauseParams{Name: "c-nobody", Paused: true}); !errors.Is(err, dialect.ErrNotFound) {
		t.Errorf("pause an unknown schedule: %v; want ErrNotFound", err)
	}
	if err := db.D.ScheduleDelete(ctx, "c-nobody"); !errors.Is(err, dialect.ErrNotFound) {
		t.Errorf("delete an unknown schedule: %v; want ErrNotFound", err)
	}
	tx, err = db.D.BeginTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, _, err := db.D.ScheduleLock(ctx, tx, "c-nobody"); !errors.Is(err, dialect.ErrNotFound) {
		t.Errorf("lock an unknown schedule: %v; want ErrNotFound", err)
	}
}

// Exclusive leases: one holder at a time; extend and release are fenced by
// holder and token (ErrLeaseLost, changing nothing).
func contractLeases(t *testing.T, db *testDB) {
	ctx := context.Background()
	l, ok, err := db.D.LeaseTryAcquire(ctx, dialect.LeaseAcquireParams{Name: "c-lease", Holder: "a", TTL: time.Minute})
	if err != nil || !ok {
		t.Fatalf("acquire a free lease: %+v, %v, %v", l, ok, err)
	}
	other, ok, err := db.D.LeaseTryAcquire(ctx, dialect.LeaseAcquireParams{Name: "c-lease", Holder: "b", TTL: time.Minute})
	if err != nil || ok || other.Holder != "a" {
		t.Fatalf("acquire a held lease: %+v, %v, %v; want refused, naming holder a", other, ok, err)
	}
	if _, err := db.D.LeaseExtend(ctx, dialect.LeaseExtendParams{Name: "c-lease", Holder: "a", Token: l.Token + 1, TTL: time.Minute}); !errors.Is(err, dialect.ErrLeaseLost) {
		t.Errorf("extend with another token: %v; want ErrLeaseLost", err)
	}
	if err := db.D.LeaseRelease(ctx, dialect.LeaseReleaseParams{Name: "c-lease", Holder: "b", Token: l.Token}); !errors.Is(err, dialect.ErrLeaseLost) {
		t.Errorf("release by another holder: %v; want ErrLeaseLost", err)
	}
	if err := db.D.LeaseRelease(ctx, dialect.LeaseReleaseParams{Name: "c-lease", Holder: "a", Token: l.Token}); err != nil {
		t.Fatalf("release by its holder: %v", err)
	}
	if _, ok, err := db.D.LeaseTryAcquire(ctx, dialect.LeaseAcquireParams{Name: "c-lease", Holder: "b", TTL: time.Minute}); err != nil || !ok {
		t.Fatalf("acquire after the release: %v, %v", ok, err)
	}
}

// contractWhere: Where names the dialect and the database the DSN names (the
// SQLite file; the user, server and database otherwise), never the DSN's
// password: workers log it and refusals start with it.
func contractWhere(t *testing.T, db *testDB) {
	where := db.D.Where()
	if db.Dialect == "sqlite" {
		file, _, _ := strings.Cut(strings.TrimPrefix(db.DSN, "sqlite://"), "?")
		if want := "sqlite file " + file; where != want {
			t.Errorf("Where() = %q, want %q", where, want)
		}
		return
	}
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatalf("the test's DSN: %v", err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if db.Dialect == "sqlserver" {
		name = u.Query().Get("database")
	}
	host := u.Host
	if db.Dialect == "postgres" && u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "5432") // pgx's default, which Where names
	}
	want := db.Dialect + " " + u.User.Username() + "@" + host + "/" + name
	if where != want {
		t.Errorf("Where() = %q, want %q", where, want)
	}
	if pw, ok := u.User.Password(); ok && strings.Contains(where, pw) {
		t.Errorf("Where() = %q shows the DSN's password", where)
	}
	if db.Dialect != "postgres" {
		return
	}
	// The test server trusts loopback logins, so any password opens it.
	u.User = url.UserPassword(u.User.Username(), "s3cret-pw")
	d, err := dialect.Open(context.Background(), u.String())
	if err != nil {
		t.Fatalf("open with a password: %v", err)
	}
	defer d.Close()
	if got := d.Where(); got != want {
		t.Errorf("Where() with a password in the DSN = %q, want %q", got, want)
	}
}
