package queue_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stageq/stageq/queue"
)

// TestMetricsBesideTheApplicationsOwn: an application that serves its own
// metrics (prometheus.DefaultGatherer, with the Go runtime and process
// collectors) gathers a worker's beside them once NewMetrics leaves its
// runtime collectors out; with them, the two registries' go_* metrics
// collide and the whole gather fails.
func TestMetricsBesideTheApplicationsOwn(t *testing.T) {
	gather := func(o queue.MetricsOptions) error {
		_, err := prometheus.Gatherers{prometheus.DefaultGatherer, queue.NewMetrics(o).Registry()}.Gather()
		return err
	}
	if err := gather(queue.MetricsOptions{}); err == nil || !strings.Contains(err.Error(), "go_") {
		t.Errorf("with the runtime collectors twice: %v; want go_* metrics collected twice", err)
	}
	if err := gather(queue.MetricsOptions{NoRuntimeCollectors: true}); err != nil {
		t.Errorf("without stageq's runtime collectors: %v", err)
	}
	m := queue.NewMetrics(queue.MetricsOptions{NoRuntimeCollectors: true})
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "stageq_") {
			t.Errorf("%s gathered without the runtime collectors", f.GetName())
		}
	}
	if len(fams) == 0 {
		t.Error("no stageq metric gathered")
	}
}
