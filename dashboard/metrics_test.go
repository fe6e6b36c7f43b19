package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/internal/cli"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// scrape reads a /metrics endpoint.
func scrape(t *testing.T, url string, set func(*http.Request)) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if set != nil {
		set(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape %s: %s: %s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	return mf
}

// sum adds the values of a family's series whose labels include match.
func sum(mf map[string]*dto.MetricFamily, name string, match map[string]string) float64 {
	f := mf[name]
	if f == nil {
		return -1
	}
	total := 0.0
next:
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range match {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total
}

func labelValues(mf map[string]*dto.MetricFamily, name, label string) map[string]bool {
	out := map[string]bool{}
	if f := mf[name]; f != nil {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == label {
					out[l.GetValue()] = true
				}
			}
		}
	}
	return out
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestWorkerMetrics runs `worker --metrics-addr` on a real database and reads
// its /metrics: attempts by outcome, latencies, rescues, schedule ticks, the
// Go runtime, and a process label capped at --metrics-processes.
func TestWorkerMetrics(t *testing.T) {
	eachQueue(t, func(t *testing.T, dsn string, c *queue.Client) {
		ctx := context.Background()
		d := c.Dialect()
		ord := 1
		one := func(process, body string, attempts int) {
			if _, err := c.Submit(ctx, stages.Plan{Process: process, Stages: []stages.Stage{{Order: &ord,
				Tasks: []stages.Task{{Body: body, MaxAttempts: attempts}}}}}); err != nil {
				t.Fatal(err)
			}
		}
		one("m", "SELECT 1", 1)
		// A worker that vanishes with a claimed task: the live one rescues it.
		if got, err := d.TaskClaim(ctx, dialect.ClaimParams{WorkerID: "ghost-2", Max: 1, Token: 9, Lease: 200 * time.Millisecond}); err != nil || len(got) != 1 {
			t.Fatalf("ghost claim: %v %v", got, err)
		}
		one("m", "SELECT 1", 1)
		one("m", "SELECT * FROM no_such_table", 2) // fails, is retried, fails for good
		for i := range 4 {
			one(fmt.Sprintf("extra-%d", i), "SELECT 1", 1)
		}
		if _, err := c.ScheduleAdd(ctx, queue.Schedule{Name: "tick", Every: stages.Duration(time.Second),
			Plan: stages.Plan{Process: "ticks", Stages: []stages.Stage{{Order: &ord, Tasks: []stages.Task{{Body: "SELECT 1"}}}}}}); err != nil {
			t.Fatal(err)
		}

		addr := freeAddr(t)
		wctx, stop := context.WithCancel(ctx)
		done := make(chan int, 1)
		go func() {
			done <- cli.Execute(wctx, cli.NewWorkerCommand(), []string{"--dsn", dsn, "--metrics-addr", addr, "--metrics-processes", "2",
				"--concurrency", "2", "--lease", "1500ms", "--retry-base", "100ms", "--retry-max", "200ms", "--poll-max", "200ms",
				"--log-format", "json", "--log-level", "error"}, io.Discard, io.Discard)
		}()
		defer func() {
			stop()
			if code := <-done; code != 0 {
				t.Errorf("worker exited with %d", code)
			}
		}()
		url := "http://" + addr + "/metrics"
		waitFor(t, 20*time.Second, "metrics endpoint", func() (bool, error) {
			resp, err := http.Get(url)
			if err == nil {
				resp.Body.Close()
			}
			return err == nil, nil
		})
		var mf map[string]*dto.MetricFamily
		waitFor(t, 60*time.Second, "every attempt counted", func() (bool, error) {
			mf = scrape(t, url, nil)
			// 6 successes by hand + the rescued one + 2 failures, and a schedule run.
			return sum(mf, "stageq_worker_attempts_total", map[string]string{"outcome": "succeeded"}) >= 8 &&
				sum(mf, "stageq_worker_attempts_total", map[string]string{"outcome": "failed"}) == 2 &&
				sum(mf, "stageq_worker_rescued_tasks_total", nil) == 1 &&
				sum(mf, "stageq_worker_schedule_ticks_total", map[string]string{"outcome": "enqueued"}) >= 1, nil
		})
		claimed := sum(mf, "stageq_worker_claimed_total", map[string]string{"kind": "sql"})
		ended := sum(mf, "stageq_worker_attempts_total", nil)
		if claimed < ended || ended < 10 {
			t.Errorf("claimed %v attempts, ended %v: want claimed >= ended >= 10", claimed, ended)
		}
		for _, name := range []string{"stageq_worker_attempt_duration_seconds", "stageq_worker_claim_duration_seconds", "stageq_worker_finish_duration_seconds"} {
			if n := sum(mf, name, nil); n < 1 {
				t.Errorf("%s has %v observations", name, n)
			}
		}
		for _, name := range []string{"stageq_worker_running_tasks", "stageq_worker_lease_extensions_lost_total", "go_goroutines", "process_resident_memory_bytes"} {
			if mf[name] == nil {
				t.Errorf("%s is missing", name)
			}
		}
		procs := labelValues(mf, "stageq_worker_claimed_total", "process")
		if len(procs) > 3 || !procs["(other)"] {
			t.Errorf("process labels %v: want at most 2 names plus (other) with --metrics-processes 2", procs)
		}
	})
}

// TestQueueMetrics reads `queuectl serve`'s /metrics: tasks by process, stage
// and state, limits, workers; processes beyond --metrics-processes summed.
func TestQueueMetrics(t *testing.T) {
	eachDialect(t, func(t *testing.T, dsn string, c *queue.Client) {
		ctx := context.Background()
		op, _ := dialect.AsOperator(c.Dialect())
		o1, o2 := 100, 200
		if _, err := c.Submit(ctx, stages.Plan{Process: "big", Stages: []stages.Stage{
			{Order: &o1, Tasks: []stages.Task{{Body: "SELECT 1"}, {Body: "SELECT 1"}, {Body: "SELECT 1"}}},
			{Order: &o2, Tasks: []stages.Task{{Body: "SELECT 1"}, {Body: "SELECT 1"}}},
		}}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, err := c.Submit(ctx, stages.Plan{Process: fmt.Sprintf("small-%d", i), Stages: []stages.Stage{
				{Order: &o1, Tasks: []stages.Task{{Body: "SELECT 1"}}}}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := op.LimitSet(ctx, "erp", 3); err != nil {
			t.Fatal(err)
		}
		base, _ := serve(t, dsn, "--addr", "127.0.0.1:0", "--metrics-processes", "2")
		mf := scrape(t, base+"/metrics", nil)
		for _, tc := range []struct {
			labels map[string]string
			want   float64
		}{
			{map[string]string{"process": "big", "stage": "100", "state": "available"}, 3},
			{map[string]string{"process": "big", "stage": "200", "state": "blocked"}, 2},
			{map[string]string{"process": "(other)", "stage": "", "state": "available"}, 2}, // two small ones beyond the top 2
			{nil, 8},
		} {
			if got := sum(mf, "stageq_queue_tasks", tc.labels); got != tc.want {
				t.Errorf("stageq_queue_tasks%v = %v, want %v", tc.labels, got, tc.want)
			}
		}
		if n := len(labelValues(mf, "stageq_queue_tasks", "process")); n != 3 {
			t.Errorf("stageq_queue_tasks has %d process labels, want 3 (2 and (other))", n)
		}
		if got := sum(mf, "stageq_limit_slots_max", map[string]string{"limit": "erp"}); got != 3 {
			t.Errorf("stageq_limit_slots_max{limit=erp} = %v", got)
		}
		if got := sum(mf, "stageq_limit_slots_in_use", map[string]string{"limit": "erp"}); got != 0 {
			t.Errorf("stageq_limit_slots_in_use{limit=erp} = %v", got)
		}
		if mf["stageq_workers"] == nil || mf["go_goroutines"] == nil {
			t.Error("stageq_workers or go_goroutines missing")
		}
	})
}
