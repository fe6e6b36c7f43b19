package conformance

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/internal/pgtest"
	"github.com/stageq/stageq/stages"
)

// TestDatabaseRestart (PostgreSQL, on a private server of the test's own: the
// shared one is never restarted): the server is restarted twice while three
// worker processes drain four processes of three stages each, with pg_ctl's
// fast mode (every session terminated, a clean shutdown), its immediate mode
// (a crash, recovered from the WAL at the start) and as an outage longer than
// the workers' lease (stopped, then started a few seconds later). Whatever
// the mode, the workers live through it, reconnect on their own and drain the
// queue: every task succeeds exactly once (attempts abandoned to the restart
// are fine, a failed or second succeeded one is not: every task allows one
// attempt), the atomic bodies' effects happen once each, the stage barrier
// holds, queuectl status shows every process succeeded, and once the queue is
// empty the workers go quiet rather than log an error at every poll.
func TestDatabaseRestart(t *testing.T) {
	for _, mode := range []string{"fast", "immediate", "outage"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel() // each on a server of its own, mostly asleep
			cluster := pgtest.StartCluster(t)
			db := newTestDB(t, cluster.DSN("postgres"))
			admin := adminPool(t, db)
			db.exec(t, "CREATE TABLE restart_effects (tag text NOT NULL)")
			const processes, perStage = 4, 5
			n, effects := 0, 0
			for p := range processes {
				plan := stages.Plan{Process: fmt.Sprintf("restart-%d", p), Defaults: stages.TaskDefaults{MaxAttempts: 1}}
				for _, order := range []int{100, 200, 300} {
					s := stages.Stage{Order: &order}
					for i := range perStage {
						task := stages.Task{Body: fmt.Sprintf("SELECT pg_sleep(%g)", []float64{0.05, 0.3, 0.1}[i%3])}
						if i%2 == 0 { // an effect to count, once only: atomic
							atomic := true
							task.Body = fmt.Sprintf("INSERT INTO restart_effects VALUES ('%s/%d/%d'); %s", plan.Process, order, i, task.Body)
							task.Atomic = &atomic
							effects++
						}
						s.Tasks = append(s.Tasks, task)
						n++
					}
					plan.Stages = append(plan.Stages, s)
				}
				db.submit(t, plan)
			}
			var workers []*workerProcess
			for i := range 3 {
				workers = append(workers, spawnWorker(t, db, "--id", fmt.Sprintf("restart-w%d", i), "--concurrency", "2",
					"--lease", "3s", "--heartbeat", "500ms", "--poll-max", "100ms", "--retry-base", "100ms", "--retry-max", "1s"))
			}
			// count answers query, waiting out the restart: the server may be
			// down, starting up or recovering.
			count := func(query string) int {
				t.Helper()
				var c int
				var err error
				for range 300 {
					if err = admin.QueryRow(query).Scan(&c); err == nil {
						return c
					}
					time.Sleep(100 * time.Millisecond)
				}
				t.Fatalf("%s: %v", query, err)
				return 0
			}
			succeeded := func() int { return count("SELECT count(*) FROM stageq.logs WHERE outcome = 'succeeded'") }
			for _, at := range []int{n / 4, n / 2} {
				waitFor(t, 3*time.Minute, fmt.Sprintf("%d tasks to succeed", at), func() bool { return succeeded() >= at })
				if running := count("SELECT count(*) FROM stageq.logs WHERE ended_at IS NULL"); running == 0 {
					t.Logf("no attempt open at the restart after %d successes", at)
				}
				switch mode {
				case "outage":
					cluster.Stop(t, "fast")
					time.Sleep(5 * time.Second) // past the 3 s lease: the workers fail fast
					cluster.Start(t)
				default:
					cluster.Restart(t, mode)
				}
				t.Logf("restarted (%s) after %d of %d tasks succeeded", mode, at, n)
			}
			waitFor(t, 3*time.Minute, "the queue to drain", func() bool {
				return succeeded() >= n && count("SELECT count(*) FROM stageq.tasks") == 0
			})
			for i, w := range workers {
				select {
				case <-w.done:
					t.Errorf("worker %d exited (%v) after the restart", i, w.cmd.ProcessState)
				default:
				}
			}
			checkRestartedRun(t, db, admin, n, effects)

			// Quiet once drained: not a warning or error at every poll while
			// the queue stays empty. One is let pass: a pooled connection the
			// restart closed, first used now, fails its one statement.
			time.Sleep(2 * time.Second)
			before := make([]int, len(workers))
			for i, w := range workers {
				before[i] = len(w.output())
			}
			time.Sleep(3 * time.Second)
			for i, w := range workers {
				var noisy []string
				for _, line := range strings.Split(w.output()[before[i]:], "\n") {
					if strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`) {
						noisy = append(noisy, line)
					}
				}
				if len(noisy) > 1 {
					t.Errorf("worker %d logs %d warnings or errors in 3 s with the queue empty and the server up:\n%s",
						i, len(noisy), strings.Join(noisy, "\n"))
				}
			}
		})
	}
}

// checkRestartedRun checks the Logs trail, the effects table and queuectl
// status of TestDatabaseRestart's drained queue: n tasks, effects of them
// atomic with an effect each.
func checkRestartedRun(t *testing.T, db *testDB, admin *sql.DB, n, effects int) {
	t.Helper()
	rows, err := admin.Query(`SELECT task_id, count(*) FILTER (WHERE outcome = 'succeeded'),
 count(*) FILTER (WHERE outcome = 'failed'), count(*) FILTER (WHERE outcome = 'abandoned'), count(*)
 FROM stageq.logs GROUP BY task_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	tasks, attempts, abandoned := 0, 0, 0
	for rows.Next() {
		var id int64
		var ok, failed, ab, all int
		if err := rows.Scan(&id, &ok, &failed, &ab, &all); err != nil {
			t.Fatal(err)
		}
		tasks, attempts, abandoned = tasks+1, attempts+all, abandoned+ab
		if ok != 1 || failed != 0 {
			t.Errorf("task %d: %d attempts succeeded, %d failed; want one succeeded and none failed", id, ok, failed)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if tasks != n {
		t.Errorf("%d tasks in Logs, want %d", tasks, n)
	}
	t.Logf("%d tasks, %d attempts, %d abandoned", tasks, attempts, abandoned)
	var tags, once int
	if err := admin.QueryRow(`SELECT count(*), count(*) FILTER (WHERE c = 1) FROM
 (SELECT tag, count(*) AS c FROM restart_effects GROUP BY tag) e`).Scan(&tags, &once); err != nil {
		t.Fatal(err)
	}
	if tags != effects || once != effects {
		t.Errorf("%d effects, %d of them once; want %d, each once", tags, once, effects)
	}
	// The client's pool still holds connections the restart closed: each
	// fails one statement (the queue's own pool pings only after 30 s idle,
	// dialect/postgres/postgres.go) and is then replaced.
	var entries []dialect.LogEntry
	for range 300 {
		if entries, err = db.Client.Logs(context.Background(), dialect.LogFilter{}); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("read logs: %v", err)
	}
	for _, v := range stages.CheckOrder(runs(entries)) {
		t.Errorf("stage order: %s", v)
	}
	code, out, stderr := runCLI(t, "queuectl", "", "--dsn", db.DSN, "status", "--all", "--json")
	var status struct {
		Processes []dialect.ProcessStatus `json:"processes"`
		Workers   []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"workers"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &status) != nil {
		t.Fatalf("queuectl status: exit %d, %s%s", code, out, stderr)
	}
	processes, workers := 0, 0
	for _, p := range status.Processes {
		if !strings.HasPrefix(p.Name, "restart-") {
			continue // default, made by the migration
		}
		processes++
		if p.State != "succeeded" {
			t.Errorf("queuectl status: process %s is %s, want succeeded", p.Name, p.State)
		}
	}
	for _, w := range status.Workers {
		workers++
		if w.State != "alive" {
			t.Errorf("queuectl status: worker %s is %s, want alive", w.ID, w.State)
		}
	}
	if processes != 4 || workers != 3 {
		t.Errorf("queuectl status shows %d processes and %d workers, want 4 and 3:\n%s", processes, workers, out)
	}
}

// TestWorkerStartedWhileTheDatabaseIsDown (PostgreSQL, a private server): a
// worker started while the server is stopped keeps retrying, logging each
// attempt (README, DSNs), and once the server is up it connects on its own
// and runs the queue's tasks.
func TestWorkerStartedWhileTheDatabaseIsDown(t *testing.T) {
	cluster := pgtest.StartCluster(t)
	db := newTestDB(t, cluster.DSN("postgres"))
	id := db.enqueue(t, "late", 100, stages.Task{Body: "SELECT 1"})
	cluster.Stop(t, "fast")
	w := spawnWorker(t, db, "--poll-max", "100ms")
	waitFor(t, 30*time.Second, "the worker to retry twice", func() bool {
		return strings.Count(w.output(), "queue database unreachable; retrying") >= 2
	})
	select {
	case <-w.done:
		t.Fatalf("the worker exited (%v) while the database was down:\n%s", w.cmd.ProcessState, w.output())
	default:
	}
	cluster.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The backoff is at most 30 s; the task succeeds within a minute.
	waitFor(t, time.Minute, "the task to succeed once the database is up", func() bool {
		entries, err := db.Client.Logs(ctx, dialect.LogFilter{TaskID: id, Outcome: dialect.OutcomeSucceeded})
		return err == nil && len(entries) == 1
	})
	if !strings.Contains(w.output(), "connected to the queue database") {
		t.Errorf("the worker does not log that it connected")
	}
}

// TestPendingStageAdvanceWaitsOutAnOutage (PostgreSQL, a private server): a
// stage ends while an operator's transaction holds its process row, so the
// worker keeps the stage's advance to try again; then the server stops for
// five seconds. The worker backs off while the advance fails, as its claims
// do, rather than try (and log a warning) every 50 ms for as long as the
// server is down, and the stage opens once it is back. Before, a five-second
// outage cost about a hundred tries, connection attempts and warnings.
func TestPendingStageAdvanceWaitsOutAnOutage(t *testing.T) {
	cluster := pgtest.StartCluster(t)
	db := newTestDB(t, cluster.DSN("postgres"))
	admin := adminPool(t, db)
	db.submit(t, plan("held", "", []int{1, 2}, sameBody("SELECT 1"), 1))
	tx, err := admin.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("SELECT 1 FROM stageq.processes WHERE name = 'held' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	w := spawnWorker(t, db, "--poll-max", "100ms", "--lease", "3s")
	waitFor(t, 30*time.Second, "the first stage's task to succeed", func() bool {
		return db.count(t, "SELECT count(*) FROM stageq.logs WHERE outcome = 'succeeded'") == 1
	})
	time.Sleep(300 * time.Millisecond) // the advance is tried, finds the row held, and waits
	const failed = "could not advance stages"
	before := strings.Count(w.output(), failed)
	cluster.Stop(t, "fast") // ends the holding transaction too
	time.Sleep(5 * time.Second)
	during := strings.Count(w.output(), failed) - before
	cluster.Start(t)
	waitFor(t, time.Minute, "the second stage to run once the server is back", func() bool {
		var n int
		return admin.QueryRow("SELECT count(*) FROM stageq.logs WHERE outcome = 'succeeded'").Scan(&n) == nil && n == 2
	})
	select {
	case <-w.done:
		t.Fatalf("the worker exited (%v)", w.cmd.ProcessState)
	default:
	}
	t.Logf("%d failed tries of the stage advance in a 5 s outage", during)
	if during == 0 {
		t.Fatal("the stage advance was not pending during the outage: the test tried nothing")
	}
	if during > 20 {
		t.Errorf("the stage advance was tried %d times in a 5 s outage: no backoff (every 50 ms is 100)", during)
	}
}

// TestWaitingRidesOutARestart (PostgreSQL, a private server): what waits for a
// process, Client.Wait and queuectl status --watch (enqueue --wait's loop),
// waits out a restart and an outage of the server and reports the end once
// it comes. Both gave up at the restart with the first error of a connection
// the server had closed.
func TestWaitingRidesOutARestart(t *testing.T) {
	cluster := pgtest.StartCluster(t)
	db := newTestDB(t, cluster.DSN("postgres"))
	db.submit(t, plan("waited", "", []int{1, 2}, sameBody("SELECT 1"), 2))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a guard, not a measure
	defer cancel()
	waited := make(chan error, 1)
	go func() {
		p, err := db.Client.Wait(ctx, "waited", 100*time.Millisecond)
		if err == nil && p.State != dialect.ProcessSucceeded {
			err = fmt.Errorf("process %s", p.State)
		}
		waited <- err
	}()
	type result struct {
		code           int
		stdout, stderr string
	}
	watched := make(chan result, 1)
	go func() {
		code, out, errOut := runCLI(t, "queuectl", "", "--dsn", db.DSN, "status", "waited", "--watch")
		watched <- result{code, out, errOut}
	}()
	// Both have read the process before the restart, on connections they
	// keep: a session's last statement is Client.Wait's read of the process,
	// another's the watch's count of done tasks from Logs.
	admin := adminPool(t, db)
	for _, last := range []string{"FROM stageq.processes WHERE name = $1", "FROM stageq.logs l JOIN"} {
		waitFor(t, time.Minute, "a session whose last statement reads "+last, func() bool {
			var n int
			err := admin.QueryRow(`SELECT count(*) FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid() AND strpos(query, $1) > 0`, last).Scan(&n)
			return err == nil && n > 0
		})
	}
	cluster.Restart(t, "fast")
	cluster.Stop(t, "fast")
	time.Sleep(time.Second) // refused connections, too
	cluster.Start(t)
	spawnWorker(t, db, "--poll-max", "100ms")
	if err := <-waited; err != nil {
		t.Errorf("Client.Wait: %v", err)
	}
	r := <-watched
	if r.code != 0 || !strings.Contains(r.stdout, `process "waited" succeeded`) {
		t.Errorf("queuectl status --watch: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "the database is out of reach") || !strings.Contains(r.stderr, "answers again") {
		t.Errorf("queuectl status --watch did not say the database was out of reach and back:\n%s", r.stderr)
	}
}
