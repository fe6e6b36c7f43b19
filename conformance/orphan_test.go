package conformance

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// TestOrphanBodiesEnd (PostgreSQL; issue 10, item 15): a worker process running
// three SQL bodies (pg_sleep) under a limit of 3 is SIGKILLed, or SIGSTOPped
// (a frozen host: its sockets stay open, so only the rescue can end its bodies).
// Other workers rescue its tasks. Sampling pg_stat_activity throughout: never
// more than 3 bodies at once, never two bodies of one task at once, so the old
// bodies were gone before the rescued tasks started again. The victim's three
// attempts end abandoned, and every task succeeds.
//
// SQLite runs bodies inside the worker process, which takes them with it.
func TestOrphanBodiesEnd(t *testing.T) {
	for name, sig := range map[string]syscall.Signal{"SIGKILL": syscall.SIGKILL, "SIGSTOP": syscall.SIGSTOP} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testOrphanBodiesEnd(t, sig)
		})
	}
}

func testOrphanBodiesEnd(t *testing.T, sig syscall.Signal) {
	ctx := context.Background()
	db := newTestDB(t, newPostgresDB(t))
	db.setLimit(t, "orphan", 3)
	const n = 6
	body := db.sleepSQL(6) // the victim's bodies outlive its 2s lease
	p := plan("orphan", "", []int{1}, sameBody(body), n)
	p.Stages[0].Limit = "orphan"
	p.Defaults.MaxAttempts = 3
	db.submit(t, p)

	// The sampler: the bodies PostgreSQL is running, by task (each body's text
	// starts with its attempt's tag, the routines' body_tag, in a comment).
	var mu sync.Mutex
	maxBodies, maxPerTask, samples := 0, 0, 0
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			rows, err := db.D.DB().QueryContext(ctx, `SELECT substring(query FROM '^/\* stageq task ([0-9]+) ')
  FROM pg_stat_activity
 WHERE datname = current_database() AND state = 'active' AND starts_with(query, '/* stageq task ')
   AND right(query, length($1)) = $1`, body)
			if err != nil {
				continue
			}
			perTask := map[string]int{}
			total := 0
			for rows.Next() {
				var task string
				if rows.Scan(&task) == nil {
					perTask[task]++
					total++
				}
			}
			rows.Close()
			mu.Lock()
			samples++
			maxBodies = max(maxBodies, total)
			for _, c := range perTask {
				maxPerTask = max(maxPerTask, c)
			}
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()

	victim := spawnWorker(t, db, "--concurrency", "6", "--lease", "2s", "--heartbeat", "300ms", "--poll-max", "50ms")
	waitFor(t, 30*time.Second, "the victim to start 3 bodies", func() bool {
		return db.count(t, fmt.Sprintf(`SELECT count(*) FROM pg_stat_activity
 WHERE datname = current_database() AND state = 'active' AND starts_with(query, '/* stageq task ')
   AND right(query, %d) = '%s'`, len(body), body)) == 3
	})
	if err := victim.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	defer victim.kill()

	cfg := fastConfig()
	cfg.Concurrency = 3
	startWorkers(t, db, 2, cfg, nil)
	waitFor(t, 2*time.Minute, "every task to succeed", func() bool {
		return len(db.logs(t, dialect.LogFilter{Process: "orphan", Outcome: dialect.OutcomeSucceeded})) == n
	})
	close(stop)
	<-sampled

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d samples: at most %d bodies at once, %d of one task", samples, maxBodies, maxPerTask)
	if maxBodies > 3 {
		t.Errorf("%d bodies ran at once under a limit of 3", maxBodies)
	}
	if maxPerTask > 1 {
		t.Errorf("one task's body ran %d times at once", maxPerTask)
	}
	if maxBodies < 3 {
		t.Errorf("at most %d bodies were seen at once; the test needs the limit reached", maxBodies)
	}
	abandoned := db.count(t, "SELECT count(*) FROM stageq.logs WHERE outcome = 'abandoned'")
	if abandoned != 3 {
		t.Errorf("%d abandoned attempts, want the victim's 3", abandoned)
	}
	if sig == syscall.SIGSTOP {
		// Its sessions are alive but idle or gone: none of its bodies runs.
		left := db.count(t, `SELECT count(*) FROM pg_stat_activity a
  JOIN stageq.logs l ON starts_with(a.query, '/* ' || `+db.routine("body_tag")+`(l.task_id, l.lease_token) || ' */')
 WHERE l.outcome = 'abandoned' AND a.state = 'active'`)
		if left != 0 {
			t.Errorf("%d of the stopped worker's bodies still run", left)
		}
	}
}
