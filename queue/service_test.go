package queue_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stageq/stageq/queue"
)

// A worker's background services start with Run, each reports its rounds of
// work (the signal tests wait on instead of sleeping), and none runs once Run
// has returned.
func TestServicesStartReportAndStop(t *testing.T) {
	ctx, c := openSQLite(t)

	var mu sync.Mutex
	passes := map[string]int{}
	stopped := false
	var late []string
	w, err := queue.NewWorker(c, queue.WorkerConfig{
		Concurrency: 1, Lease: 600 * time.Millisecond, Heartbeat: 50 * time.Millisecond,
		Retention: queue.Retention{Every: 100 * time.Millisecond},
		OnPass: func(service string) {
			mu.Lock()
			defer mu.Unlock()
			if stopped {
				late = append(late, service)
			}
			passes[service]++
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()

	// Rounds each service reports before the test stops the worker (the
	// scheduler's idle check and the pruner's first pass come seconds apart).
	want := map[string]int{queue.ServiceHeartbeat: 3, queue.ServiceRescue: 3, queue.ServicePrune: 1, queue.ServiceScheduler: 1}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		missing := ""
		for s, n := range want {
			if passes[s] < n {
				missing = s
				break
			}
		}
		seen := fmt.Sprint(passes)
		mu.Unlock()
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("service %q did not report %d rounds of work; passes: %v", missing, want[missing], seen)
		}
		time.Sleep(20 * time.Millisecond)
	}

	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	stopped = true
	mu.Unlock()
	// Run waited for every service to return: several heartbeat intervals
	// later, none has reported anything.
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(late) > 0 {
		t.Errorf("services ran after Run returned: %v", late)
	}
}

// TestRetainWorkersFloor: a Workers retention shorter than a live worker's
// silence between heartbeats let the pruner delete live rows, the worker's
// own among them (Workers 3s, a pass every second: status showed no worker).
// NewWorker refuses one below MinRetainWorkers (ten minutes); zero (the
// default) and negative (keep for ever) stay as they were.
func TestRetainWorkersFloor(t *testing.T) {
	_, c := openSQLite(t)
	for _, cfg := range []queue.WorkerConfig{
		{Retention: queue.Retention{Workers: 3 * time.Second, Every: time.Second}},
		{Retention: queue.Retention{Workers: 10*time.Minute - time.Millisecond}},
	} {
		if _, err := queue.NewWorker(c, cfg); err == nil || !strings.Contains(err.Error(), "Retention.Workers must be at least") {
			t.Errorf("lease %s, heartbeat %s, Workers %s: err = %v, want the floor named", cfg.Lease, cfg.Heartbeat, cfg.Retention.Workers, err)
		}
	}
	for _, cfg := range []queue.WorkerConfig{
		{}, {Retention: queue.Retention{Workers: -1}}, {Retention: queue.Retention{Workers: 10 * time.Minute}},
		{Lease: 30 * time.Minute, Retention: queue.Retention{Workers: 10 * time.Minute}},
	} {
		if _, err := queue.NewWorker(c, cfg); err != nil {
			t.Errorf("Workers %s: %v", cfg.Retention.Workers, err)
		}
	}
}
