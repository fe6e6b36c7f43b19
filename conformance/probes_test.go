package conformance

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/stages"
)

// TestWorkerProbes: a worker process's /readyz says whether it claims, and
// why not, through the faults that stop it: a transaction holding the lock its
// heartbeat needs (ready again once it ends) and a SIGTERM with a body still
// running (stopping while it drains). /healthz stays ok throughout, and the
// stageq_worker_ready gauge follows /readyz.
func TestWorkerProbes(t *testing.T) {
	forEachDialectBut(t, "sqlserver", "the blocking transaction below is written for PostgreSQL and SQLite", func(t *testing.T, db *testDB) {
		w := spawnWorker(t, db, "--id", "probed", "--concurrency", "2", "--lease", "1500ms", "--heartbeat", "300ms",
			"--poll-max", "50ms", "--shutdown-grace", "30s", "--no-scheduler", "--metrics-addr", "127.0.0.1:0")
		base := probeBase(t, w)
		waitProbe(t, base+"/readyz", http.StatusOK, "ready")
		waitProbe(t, base+"/metrics", http.StatusOK, "stageq_worker_ready 1")

		release := blockHeartbeats(t, db) // failfast_test.go
		waitProbe(t, base+"/readyz", http.StatusServiceUnavailable, "heartbeats do not reach the queue database")
		waitProbe(t, base+"/metrics", http.StatusOK, "stageq_worker_ready 0")
		waitProbe(t, base+"/healthz", http.StatusOK, "ok")
		release()
		waitProbe(t, base+"/readyz", http.StatusOK, "ready")

		// Stopping: SIGTERM while a body runs; the worker drains it.
		db.enqueue(t, "probed", 1, stages.Task{Body: db.sleepSQL(3), MaxAttempts: 1})
		waitFor(t, time.Minute, "the body to start", func() bool {
			return len(db.logs(t, dialect.LogFilter{Process: "probed", Outcome: dialect.OutcomeRunning})) == 1
		})
		w.cmd.Process.Signal(syscall.SIGTERM)
		waitProbe(t, base+"/readyz", http.StatusServiceUnavailable, "stopping")
		waitProbe(t, base+"/healthz", http.StatusOK, "ok")
		<-w.done
		if n := len(db.logs(t, dialect.LogFilter{Process: "probed", Outcome: dialect.OutcomeSucceeded})); n != 1 {
			t.Errorf("the body running at SIGTERM: %d succeeded, want 1 (drained)", n)
		}
	})
}

// TestWorkerProbesWhileConnecting: a worker waiting for its database (down,
// or not yet up) is alive and not ready, and says so.
func TestWorkerProbesWhileConnecting(t *testing.T) {
	db := &testDB{DSN: "postgres://postgres@127.0.0.1:1/nowhere?sslmode=disable"}
	w := spawnWorker(t, db, "--metrics-addr", "127.0.0.1:0")
	base := probeBase(t, w)
	waitProbe(t, base+"/readyz", http.StatusServiceUnavailable, "connecting to the queue database")
	waitProbe(t, base+"/healthz", http.StatusOK, "ok")
	waitProbe(t, base+"/metrics", http.StatusOK, "stageq_worker_ready 0")
}

var probeAddr = regexp.MustCompile(`"addr":"(127\.0\.0\.1:\d+)"`)

// probeBase is the worker's metrics address, from its log line.
func probeBase(t *testing.T, w *workerProcess) string {
	t.Helper()
	var addr string
	waitFor(t, time.Minute, "the worker's metrics address", func() bool {
		m := probeAddr.FindStringSubmatch(w.output())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return "http://" + addr
}

// waitProbe polls url until it answers status with a body containing want.
func waitProbe(t *testing.T, url string, status int, want string) {
	t.Helper()
	var last string
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = resp.Status + ": " + string(b)
			if resp.StatusCode == status && strings.Contains(string(b), want) {
				return
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: want %d with %q; last answer %s", url, status, want, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
