//go:build unix

package queue_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// TestExecCancelStopsTheCommandsChildren: a worker stopped past its shutdown
// grace ends a running command and every process the command started. Before,
// only the program was killed: a script's child ran on (while the task,
// released, could run again elsewhere) and held the output pipe, so the
// worker's Run waited for it, far past the grace.
func TestExecCancelStopsTheCommandsChildren(t *testing.T) {
	ctx, c := openSQLite(t)
	pidFile := filepath.Join(t.TempDir(), "child")
	script := `sleep 30 & echo $! > ` + pidFile + `; wait`
	if _, err := c.Enqueue(ctx, "", 1, stages.Task{Kind: queue.KindExec, Body: `["sh", "-c", "` + script + `"]`}); err != nil {
		t.Fatal(err)
	}
	w, err := queue.NewWorker(c, queue.WorkerConfig{AllowExec: []string{"sh"}, ShutdownGrace: 200 * time.Millisecond,
		PollMin: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	go func() { // SIGTERM, once the child runs
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
				break
			}
		}
		stop()
	}()
	began := time.Now()
	if err := w.Run(rctx); err != nil {
		t.Fatal(err)
	}
	// The child's 30 s sleep is what Run waited for before: a bound well
	// under it, not a timing measurement.
	if took := time.Since(began); took > 20*time.Second {
		t.Errorf("Run returned %s after the stop; want it bounded by the grace and the command's kill, not the child's sleep", took)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the command never started its child: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	logs, err := c.Logs(ctx, dialect.LogFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(logs) != 1 || logs[0].Outcome != dialect.OutcomeReleased {
		t.Fatalf("Logs: %+v; want the attempt released at shutdown", logs)
	}
}

// waitGone waits until process pid has ended: no such process, or a zombie
// (reparented, it waits for an init that may not reap it in a container).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
			if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "Z" {
				return
			}
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the command's child (pid %d) still runs after the task was cancelled", pid)
		}
	}
}
