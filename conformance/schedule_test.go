package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// schedFull runs the schedule and lease proofs for the full durations of issue 5
// (30 s and 20 s); by default they are shorter, which still spans hundreds of
// racing ticks and lease hand-offs, so the suite stays quick on a 2-CPU machine.
func schedFull() bool { return os.Getenv("STAGEQ_CONFORMANCE_FULL") != "" }

// schedTicks counts, per tick of a schedule, the tasks enqueued for it: first
// attempts in Logs (tasks that ran) plus never-claimed tasks in Tasks. The proof
// does not trust the scheduler's own bookkeeping. (It does not go by task id:
// SQLite reuses the ids of tasks that left the table.)
func schedTicks(t *testing.T, db *testDB, name string) map[time.Time]int {
	t.Helper()
	q := schedSQL(db, `SELECT scheduled_for FROM stageq.logs WHERE schedule_name = $1 AND attempt = 1
	UNION ALL SELECT scheduled_for FROM stageq.tasks WHERE schedule_name = $1 AND attempt = 0`)
	rows, err := db.D.DB().QueryContext(context.Background(), q, name)
	if err != nil {
		t.Fatalf("read ticks: %v", err)
	}
	defer rows.Close()
	out := map[time.Time]int{}
	for rows.Next() {
		var at time.Time
		if db.Dialect == "sqlite" {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			if at, err = time.Parse("2006-01-02 15:04:05.000", s); err != nil {
				t.Fatal(err)
			}
		} else if err := rows.Scan(&at); err != nil {
			t.Fatal(err)
		}
		out[at.UTC()]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// schedRuns reads a schedule's run history.
func schedRuns(t *testing.T, db *testDB, name string) []dialect.ScheduleRun {
	t.Helper()
	runs, err := db.Client.ScheduleRuns(context.Background(), name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// everySecond is a schedule named name that enqueues task, alone in its plan,
// every second.
func everySecond(name string, task stages.Task) queue.Schedule {
	o := 0
	return queue.Schedule{Name: name, Every: stages.Duration(time.Second),
		Plan: stages.Plan{Stages: []stages.Stage{{Order: &o, Tasks: []stages.Task{task}}}}}
}

// addSchedule adds s (Client.ScheduleAdd), failing the test on an error.
func (db *testDB) addSchedule(t *testing.T, s queue.Schedule) {
	t.Helper()
	if _, err := db.Client.ScheduleAdd(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func schedDBNow(t *testing.T, db *testDB) time.Time {
	t.Helper()
	now, err := db.D.ClockNow(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// schedUnfinished counts a schedule's tasks still in the queue.
func schedUnfinished(t *testing.T, db *testDB, name string) int {
	t.Helper()
	return db.count(t, schedSQL(db, `SELECT count(*) FROM stageq.tasks WHERE schedule_name = $1`), name)
}

// schedSQL adapts a PostgreSQL-spelled test query to the dialect (SQLite's
// tables carry a stageq_ prefix and its placeholders are ?N).
func schedSQL(db *testDB, q string) string {
	switch db.Dialect {
	case "sqlite":
		q = strings.ReplaceAll(q, "stageq.", "stageq_")
		q = strings.ReplaceAll(q, "$", "?")
	case "sqlserver":
		q = strings.ReplaceAll(q, "$", "@p")
	}
	return q
}

// TestScheduleClusterExactlyOnce: 10 worker processes whose own clocks are
// skewed from -5 to +5 minutes race a 1-second interval schedule. Halfway, the
// worker that enqueued the latest tick is killed with SIGKILL. Every tick from
// the first to the last is enqueued exactly once (counted from the tasks'
// recorded ticks in Logs and Tasks), none is lost, and the ticks keep coming
// after the kill without the dead worker.
func TestScheduleClusterExactlyOnce(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		half := 10 * time.Second
		if schedFull() {
			half = 15 * time.Second
		}
		db.addSchedule(t, everySecond("tick", stages.Task{Body: "SELECT 1"}))
		workers := map[string]*workerProcess{}
		for i := range 10 {
			skew := time.Duration(i-5) * time.Minute // -5m … +4m, and one at +5m below
			if i == 9 {
				skew = 5 * time.Minute
			}
			id := fmt.Sprintf("sched-w%d", i)
			workers[id] = spawnWorker(t, db, "--id", id, "--clock-skew", skew.String(), "--concurrency", "2",
				"--lease", "5s", "--poll-max", "200ms", "--log-level", "info")
		}
		waitFor(t, 30*time.Second, "the first ticks", func() bool { return len(schedRuns(t, db, "tick")) >= 2 })
		time.Sleep(half) // the run itself, not an assertion

		runs := schedRuns(t, db, "tick")
		victimID := runs[len(runs)-1].WorkerID
		victim, ok := workers[victimID]
		if !ok {
			t.Fatalf("latest tick enqueued by unknown worker %q", victimID)
		}
		victim.kill()
		killedAt := schedDBNow(t, db)
		t.Logf("killed %s, the enqueuer of tick %s", victimID, runs[len(runs)-1].ScheduledFor.Format(time.RFC3339Nano))
		time.Sleep(half)
		// Ticks kept coming after the kill: before the pause, the newest one is
		// due within 2 s of the database's clock. Waited for, not read once:
		// ten worker processes share two cores, and one may fire late.
		waitFor(t, 10*time.Second, "a tick due within the last 2 s", func() bool {
			now := schedDBNow(t, db)
			for at := range schedTicks(t, db, "tick") {
				if now.Sub(at) <= 2*time.Second {
					return true
				}
			}
			return false
		})
		if err := db.Client.SchedulePause(ctx, "tick"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the scheduled tasks to run", func() bool { return schedUnfinished(t, db, "tick") == 0 })

		ticks := schedTicks(t, db, "tick")
		var times []time.Time
		for at, n := range ticks {
			times = append(times, at)
			if n != 1 {
				t.Errorf("tick %s was enqueued %d times", at.Format(time.RFC3339Nano), n)
			}
		}
		slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
		if len(times) < int(2*half/time.Second)-3 {
			t.Fatalf("only %d ticks in %s", len(times), 2*half)
		}
		for i := 1; i < len(times); i++ {
			if gap := times[i].Sub(times[i-1]); gap != time.Second {
				t.Errorf("ticks %s and %s are %s apart: lost tick(s)", times[i-1].Format(time.RFC3339Nano), times[i].Format(time.RFC3339Nano), gap)
			}
		}
		// Ticks kept coming after the kill, right up to the pause (waited for
		// above).
		last := times[len(times)-1]
		if last.Before(killedAt.Add(half - 3*time.Second)) {
			t.Errorf("last tick %s; the kill at %s stopped the schedule", last, killedAt)
		}
		// The history agrees, and the racing was real: several workers enqueued.
		enqueuers := map[string]int{}
		for _, r := range schedRuns(t, db, "tick") {
			if r.Outcome != dialect.RunEnqueued || r.ProcessID == 0 || r.Process == "" {
				t.Errorf("tick %s: outcome %s, process %q (id %d); want enqueued, to a process named", r.ScheduledFor, r.Outcome, r.Process, r.ProcessID)
			}
			if ticks[r.ScheduledFor.UTC()] != 1 {
				t.Errorf("history tick %s has %d tasks", r.ScheduledFor, ticks[r.ScheduledFor.UTC()])
			}
			enqueuers[r.WorkerID]++
			if r.WorkerID == victimID && r.FiredAt.After(killedAt) {
				t.Errorf("the killed worker enqueued tick %s", r.ScheduledFor)
			}
		}
		if len(enqueuers) < 2 {
			t.Errorf("only %v enqueued; the workers did not race", enqueuers)
		}
		// Logs rows of scheduled runs name their schedule and tick.
		if n := db.count(t, schedSQL(db, `SELECT count(*) FROM stageq.logs WHERE process_name = 'tick'
		   AND (schedule_name IS NULL OR schedule_name <> 'tick' OR scheduled_for IS NULL)`)); n != 0 {
			t.Errorf("%d Logs rows of the schedule's runs do not name it", n)
		}
		t.Logf("%d ticks, each once; enqueuers %v", len(times), enqueuers)
	})
}

// TestScheduleMissedTicks: a schedule whose ticks were missed (nobody ran it for
// ten seconds, grace two seconds). Policy skip drops them and resumes; policy
// once enqueues one catch-up run for them, then resumes. Either way no missed
// tick is enqueued on its own.
func TestScheduleMissedTicks(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		start := schedDBNow(t, db).Add(-10 * time.Second)
		for _, missed := range []string{dialect.MissedSkip, dialect.MissedOnce} {
			s := everySecond("missed-"+missed, stages.Task{Body: "SELECT 1"})
			s.Start, s.Missed, s.Grace = start, missed, stages.Duration(2*time.Second)
			db.addSchedule(t, s)
		}
		startWorkers(t, db, 2, fastConfig(), nil)
		for _, missed := range []string{dialect.MissedSkip, dialect.MissedOnce} {
			name := "missed-" + missed
			waitFor(t, 20*time.Second, name+" to resume its ticks", func() bool { return len(schedRuns(t, db, name)) >= 4 })
			runs := schedRuns(t, db, name)
			first := runs[0]
			if !first.ScheduledFor.Equal(start) {
				t.Errorf("%s: first handled tick %s, want the first missed one %s", name, first.ScheduledFor, start)
			}
			want, wantTasks := dialect.RunMissed, 0
			if missed == dialect.MissedOnce {
				want, wantTasks = dialect.RunCaughtUp, 1
			}
			if first.Outcome != want || first.TaskCount != wantTasks {
				t.Errorf("%s: first run %s with %d tasks, want %s with %d", name, first.Outcome, first.TaskCount, want, wantTasks)
			}
			// Ticks from the second to the seventh were certainly older than the grace
			// when the scheduler first looked: none was handled on its own.
			for _, r := range runs[1:] {
				if r.ScheduledFor.Before(start.Add(7*time.Second)) || r.Outcome != dialect.RunEnqueued {
					t.Errorf("%s: tick %s (%s) handled after the missed ones", name, r.ScheduledFor, r.Outcome)
				}
			}
			for i := 2; i < len(runs); i++ {
				if gap := runs[i].ScheduledFor.Sub(runs[i-1].ScheduledFor); gap != time.Second {
					t.Errorf("%s: on-time ticks %s apart after resuming", name, gap)
				}
			}
			ticks := schedTicks(t, db, name)
			if missed == dialect.MissedOnce && ticks[start.UTC()] != 1 {
				t.Errorf("%s: catch-up tick has %d tasks, want one; start %s ticks %v", name, ticks[start.UTC()], start.UTC(), ticks)
			}
		}
	})
}

// TestScheduleSingleton: a singleton schedule ticking every second whose run
// takes about 2.5 s skips the ticks that come while its run is unfinished, and
// its runs never overlap, though the worker could run four at once.
func TestScheduleSingleton(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		s := everySecond("single", stages.Task{Kind: "slow", Body: "2500ms"})
		s.Singleton = true
		db.addSchedule(t, s)
		cfg := fastConfig()
		cfg.Concurrency = 4
		startWorkers(t, db, 2, cfg, func(w *queue.Worker) { w.Handle("slow", waitBody) })
		waitFor(t, 30*time.Second, "three runs and some skipped ticks", func() bool {
			return len(db.logs(t, dialect.LogFilter{Process: "single", Outcome: dialect.OutcomeSucceeded})) >= 3
		})
		counts := map[string]int{}
		for _, r := range schedRuns(t, db, "single") {
			counts[r.Outcome]++
		}
		if counts[dialect.RunSkipped] < 2 || counts[dialect.RunEnqueued] < 3 {
			t.Errorf("outcomes %v: want enqueued runs and skipped ticks between them", counts)
		}
		entries := db.logs(t, dialect.LogFilter{Process: "single"})
		for i := 1; i < len(entries); i++ {
			prev := entries[i-1]
			if prev.EndedAt == nil || entries[i].StartedAt.Before(*prev.EndedAt) {
				t.Errorf("run of task %d started at %s before task %d's run ended (%v)", entries[i].TaskID,
					entries[i].StartedAt, prev.TaskID, prev.EndedAt)
			}
		}
	})
}

// TestScheduleCLI: the operator commands manage schedules, run-now enqueues a run
// whose Logs row names the schedule, and bad input (invalid cron, zero or
// negative interval, duplicate name, unknown schedule) gets a clear message,
// exit code 2, and changes nothing.
func TestScheduleCLI(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		q := func(args ...string) (int, string, string) {
			return runCLI(t, "queuectl", "", append([]string{"--dsn", db.DSN, "schedule"}, args...)...)
		}
		if code, _, stderr := q("add", "nightly", "--cron", "0 30 2 * * *", "--tz", "Europe/Paris", "--singleton", "--order", "100", "SELECT 1"); code != 0 {
			t.Fatalf("add: exit %d: %s", code, stderr)
		}
		if code, _, stderr := q("add", "often", "--every", "1h", "--missed", "once", "SELECT 2"); code != 0 {
			t.Fatalf("add: exit %d: %s", code, stderr)
		}
		dir := t.TempDir()
		file := dir + "/sched.yaml"
		if err := os.WriteFile(file, []byte("name: fromfile\ncron: '@daily'\nplan:\n  stages:\n    - order: 1\n      tasks:\n        - body: SELECT 3\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, _, stderr := q("add", "--from", file, "--connect-timeout", "5s"); code != 0 { // the connection's flags may go with it
			t.Fatalf("add --from: exit %d: %s", code, stderr)
		}
		list := func() []dialect.ScheduleInfo {
			code, stdout, stderr := q("list", "--json")
			if code != 0 {
				t.Fatalf("list: exit %d: %s", code, stderr)
			}
			var out []dialect.ScheduleInfo
			if err := json.Unmarshal([]byte(stdout), &out); err != nil {
				t.Fatalf("list --json: %v: %s", err, stdout)
			}
			return out
		}
		before := list()
		if len(before) != 3 || before[1].Name != "nightly" || before[1].NextRun.UTC().Format("04:05") != "30:00" {
			t.Fatalf("schedules = %+v", before)
		}

		bad := []struct {
			name string
			args []string
			want string
		}{
			{"invalid cron", []string{"add", "x", "--cron", "61 * * * *", "SELECT 1"}, "above maximum"},
			{"cron nonsense", []string{"add", "x", "--cron", "every tuesday", "SELECT 1"}, "invalid schedule"},
			{"zero interval", []string{"add", "x", "--every", "0s", "SELECT 1"}, "must be positive"},
			{"negative interval", []string{"add", "x", "--every", "-5s", "SELECT 1"}, "must be positive"},
			{"interval below a second", []string{"add", "x", "--every", "1ms", "SELECT 1"}, "interval must be at least 1s, got 1ms"},
			{"neither", []string{"add", "x", "SELECT 1"}, "cron expression or a positive interval"},
			{"both", []string{"add", "x", "--cron", "* * * * *", "--every", "1m", "SELECT 1"}, "not both"},
			{"bad zone", []string{"add", "x", "--cron", "* * * * *", "--tz", "Mars/Olympus", "SELECT 1"}, "Mars/Olympus"},
			{"bad policy", []string{"add", "x", "--every", "1m", "--missed", "twice", "SELECT 1"}, "missed must be"},
			{"no body", []string{"add", "x", "--every", "1m"}, "nothing to schedule"},
			{"duplicate name", []string{"add", "nightly", "--every", "1m", "SELECT 1"}, "already exists"},
			{"unknown pause", []string{"pause", "nope"}, "not found"},
			{"unknown resume", []string{"resume", "nope"}, "not found"},
			{"unknown delete", []string{"delete", "nope"}, "not found"},
			{"unknown run-now", []string{"run-now", "nope"}, "not found"},
		}
		for _, c := range bad {
			code, stdout, stderr := q(c.args...)
			want := 2
			if strings.HasPrefix(c.name, "unknown ") {
				want = 3 // README: 3 not found
			}
			if code != want || !strings.Contains(stderr, c.want) || stdout != "" {
				t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d saying %q", c.name, code, stdout, stderr, want, c.want)
			}
		}
		if after := list(); !slices.EqualFunc(before, after, func(a, b dialect.ScheduleInfo) bool {
			return a.Name == b.Name && a.NextRun.Equal(b.NextRun) && a.Paused == b.Paused
		}) {
			t.Errorf("bad input changed the schedules: %+v -> %+v", before, after)
		}
		assertEmpty(t, db)

		for _, args := range [][]string{{"pause", "often"}, {"resume", "often"}, {"pause", "nightly"}, {"delete", "fromfile"}} {
			if code, _, stderr := q(args...); code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, stderr)
			}
		}
		after := list()
		if len(after) != 2 || !after[0].Paused || after[1].Paused {
			t.Errorf("after pause/resume/delete: %+v", after)
		}
		code, stdout, stderr := q("run-now", "nightly")
		if code != 0 || !strings.Contains(stdout, "enqueued 1 task") {
			t.Fatalf("run-now: exit %d: %s %s", code, stdout, stderr)
		}
		cfg := fastConfig()
		cfg.NoScheduler = true
		startWorkers(t, db, 1, cfg, nil)
		waitFor(t, 20*time.Second, "the manual run to finish", func() bool { return schedUnfinished(t, db, "nightly") == 0 })
		ticks := schedTicks(t, db, "nightly")
		if len(ticks) != 1 {
			t.Errorf("run-now ticks = %v, want one", ticks)
		}
		runs := schedRuns(t, db, "nightly")
		if len(runs) != 1 || runs[0].Outcome != dialect.RunManual {
			t.Errorf("history = %+v, want one manual run", runs)
		}
		if n := db.count(t, schedSQL(db, `SELECT count(*) FROM stageq.logs WHERE schedule_name = 'nightly'`)); n != 1 {
			t.Errorf("%d Logs rows name schedule nightly, want 1", n)
		}
	})
}
