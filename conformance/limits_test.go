package conformance

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// TestLimitNeverExceededWithCrashes: 20 worker slots in 10 worker processes,
// limit 3, tasks that take time, three workers SIGKILLed mid-run and replaced.
// From Logs, at most 3 limited attempts overlap (an abandoned attempt holds its
// slot until the rescue that ends it), and every task completes.
func TestLimitNeverExceededWithCrashes(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		db.setLimit(t, "erp-api", 3)
		const n = 30
		p := plan("erp", "", []int{100}, sameBody(db.sleepSQL(0.3)), n)
		p.Stages[0].Limit = "erp-api"
		p.Defaults.MaxAttempts = 10
		db.submit(t, p)
		fairSubmit(t, db, "filler", 40, 0.1, nil)
		args := []string{"--concurrency", "2", "--lease", "2s", "--heartbeat", "300ms", "--poll-max", "100ms"}
		var workers []*workerProcess
		for range 10 {
			workers = append(workers, spawnWorker(t, db, args...))
		}
		waitFor(t, time.Minute, "limited tasks to start", func() bool {
			return len(db.logs(t, dialect.LogFilter{Process: "erp"})) >= 6
		})
		for _, w := range workers[:3] {
			w.kill()
		}
		for range 3 {
			spawnWorker(t, db, args...)
		}
		waitFor(t, 3*time.Minute, "every limited task to succeed", func() bool {
			return len(db.logs(t, dialect.LogFilter{Process: "erp", Outcome: dialect.OutcomeSucceeded})) >= n
		})
		entries := db.logs(t, dialect.LogFilter{Process: "erp"})
		got := stages.MaxOverlap(runs(entries), nil)
		if got > 3 {
			t.Errorf("%d limited attempts overlapped, limit is 3", got)
		}
		if got < 2 {
			t.Errorf("at most %d limited attempts overlapped; the test needs contention", got)
		}
		t.Logf("max overlap %d; %d attempts, %d abandoned", got, len(entries), countOutcome(entries, dialect.OutcomeAbandoned))
	})
}

// limTracker measures how many handler runs overlap, per phase.
type limTracker struct {
	mu            sync.Mutex
	cur, phaseMax int
	done          int
	target        int // the phase's limit: a run waits (bounded) until that many run
}

// run holds its slot until the phase's limit is reached (or 3s pass), so that
// "the limit is reached" does not depend on how fast a loaded machine claims.
func (l *limTracker) run(ctx context.Context, _ *queue.Task) error {
	l.mu.Lock()
	l.cur++
	l.phaseMax = max(l.phaseMax, l.cur)
	l.mu.Unlock()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		l.mu.Lock()
		reached := l.cur >= l.target
		l.mu.Unlock()
		if reached {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case <-time.After(30 * time.Millisecond):
	case <-ctx.Done():
	}
	l.mu.Lock()
	l.cur--
	l.done++
	l.mu.Unlock()
	return nil
}

func (l *limTracker) read() (cur, phaseMax, done int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur, l.phaseMax, l.done
}

func (l *limTracker) newPhase(target int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.phaseMax = l.cur
	l.target = target
}

// TestLimitChangeMidRun: a limit is a live knob. 3, then 1 (running tasks
// finish, no new ones above it), then 5, each reflected without a restart.
// The kind limit (kind:lim) is checked the same way first.
func TestLimitChangeMidRun(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		op := limOperator(t, db)
		db.setLimit(t, "kind:lim", 2)
		p := plan("knob", "lim", []int{100}, func(_, i int) string { return fmt.Sprint(i) }, 80)
		p.Defaults.Limit = "knob"
		db.submit(t, p)
		tr := &limTracker{}
		cfg := fastConfig()
		cfg.Concurrency = 2
		startWorkers(t, db, 5, cfg, func(w *queue.Worker) { w.Handle("lim", tr.run) })
		phase := func(limit, tasks int, key string) {
			t.Helper()
			tr.mu.Lock()
			tr.target = limit
			tr.mu.Unlock()
			db.setLimit(t, key, limit)
			// Both the bodies running and the tasks leased: a task leased under
			// the old limit whose body has not started yet would start in this
			// phase.
			waitFor(t, time.Minute, fmt.Sprintf("running to drop to %d", limit), func() bool {
				cur, _, _ := tr.read()
				l, err := op.LimitGet(ctx, key)
				return cur <= limit && err == nil && l.Running <= limit
			})
			tr.newPhase(limit)
			_, _, start := tr.read()
			waitFor(t, 2*time.Minute, fmt.Sprintf("%d tasks under limit %d", tasks, limit), func() bool {
				_, _, done := tr.read()
				return done >= start+tasks
			})
			_, got, _ := tr.read()
			if got > limit {
				t.Errorf("limit %s=%d: %d ran at once", key, limit, got)
			}
			if got < limit {
				t.Errorf("limit %s=%d: only %d ran at once; the limit should be reached", key, limit, got)
			}
			t.Logf("limit %s=%d: max %d at once", key, limit, got)
		}
		phase(2, 8, "kind:lim") // the kind limit binds first
		// Set the named limit before the kind limit goes, so that no moment is
		// unlimited (tasks claimed then would start after the next phase began).
		db.setLimit(t, "knob", 2)
		if err := op.LimitDelete(ctx, "kind:lim"); err != nil {
			t.Fatal(err)
		}
		phase(3, 12, "knob")
		phase(1, 6, "knob")
		phase(5, 20, "knob")
		l, err := op.LimitGet(ctx, "knob")
		if err != nil || l.Max != 5 {
			t.Errorf("limit get: %+v, %v", l, err)
		}
	})
}

// TestLimitChangeWakesIdleWorkers: a change that may admit waiting tasks
// wakes idle workers, as a new task does, rather than leaving the freed slots
// unused until their next poll. A worker polls once a minute here; one task
// of two runs under a limit of 1; the limit is raised or removed and the
// second task must start well before that poll. PostgreSQL's limit set
// notified; a process limit's change and a delete did not (found by a probe
// of pickups: 2.2 s with the default poll-max of 2 s, against 30 ms for a
// raised named limit). SQL Server has no notifications: its workers find a
// change at their next poll (seen failing so on Babelfish).
func TestLimitChangeWakesIdleWorkers(t *testing.T) {
	for _, change := range []string{"raise", "delete", "process-raise", "process-delete"} {
		t.Run(change, func(t *testing.T) {
			forEachDialectBut(t, "sqlserver", "SQL Server's workers learn of nothing but by polling (no LISTEN/NOTIFY)", func(t *testing.T, db *testDB) {
				ctx := context.Background()
				op := limOperator(t, db)
				p := plan("woken", "wait", []int{1}, sameBody("1m"), 2)
				key := "woken"
				if strings.HasPrefix(change, "process-") {
					db.submit(t, p)
					key = "process:woken"
					db.setLimit(t, key, 1)
				} else {
					db.setLimit(t, key, 1)
					p.Stages[0].Limit = key
					db.submit(t, p)
				}
				cfg := fastConfig()
				cfg.Concurrency = 2
				cfg.PollMin, cfg.PollMax = time.Minute, time.Minute
				cfg.ShutdownGrace = 100 * time.Millisecond
				startWorkers(t, db, 1, cfg, func(w *queue.Worker) { w.Handle("wait", waitBody) })
				running := func() int {
					return db.count(t, "SELECT count(*) FROM "+db.table("tasks")+" WHERE state = 'running'")
				}
				waitFor(t, 30*time.Second, "one task to run", func() bool { return running() == 1 })
				time.Sleep(200 * time.Millisecond) // the worker's claim found the limit full; it waits for its poll
				var err error
				if strings.HasSuffix(change, "raise") {
					err = op.LimitSet(ctx, key, 2)
				} else {
					err = op.LimitDelete(ctx, key)
				}
				if err != nil {
					t.Fatal(err)
				}
				// Well under the minute of the worker's poll.
				waitFor(t, 15*time.Second, "the second task to start after the limit's "+change, func() bool { return running() == 2 })
			})
		})
	}
}
