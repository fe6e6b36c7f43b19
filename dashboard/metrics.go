package dashboard

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stageq/stageq/dialect"
)

// Queue-level gauges on `queuectl serve`'s /metrics, read from the database at
// each scrape with bounded queries: the task counts are grouped in the database
// and at most stateGroupsMax groups come back (largest first); limits and
// workers are short tables.
//
// Cardinality: the MetricsProcesses processes with the most tasks keep a
// process and a stage label; every other process is summed into
// process="(other)", stage="" per state. Limits are capped the same way
// (limit="(other)"). So a queue with 10,000 processes still exposes at most
// MetricsProcesses x stages x states series.
const (
	stateGroupsMax = 5000
	scrapeTimeout  = 5 * time.Second
	// scrapeReuse: scrapes closer together than this (several Prometheus
	// servers, a person reloading) get the last reading, not new queries.
	scrapeReuse = 5 * time.Second
)

var (
	descTasks = prometheus.NewDesc("stageq_queue_tasks",
		"Tasks in the queue by process, stage (ExecutionOrder) and state; processes beyond the top N are summed as process=\"(other)\".",
		[]string{"process", "stage", "state"}, nil)
	descLimitUsed = prometheus.NewDesc("stageq_limit_slots_in_use",
		"Running tasks that hold a slot of a concurrency limit (process:NAME is a process's max_parallel).", []string{"limit"}, nil)
	descLimitMax = prometheus.NewDesc("stageq_limit_slots_max", "A concurrency limit's maximum.", []string{"limit"}, nil)
	descWorkers  = prometheus.NewDesc("stageq_workers",
		"Workers by state: alive (heartbeat within --dead-after), dead, stopped.", []string{"state"}, nil)
	descScrape = prometheus.NewDesc("stageq_queue_scrape_duration_seconds",
		"How long reading the queue gauges took.", nil, nil)
	descGroupsCapped = prometheus.NewDesc("stageq_queue_task_groups_capped",
		"1 when the task counts hit the bound of groups read and the smallest groups are missing.", nil, nil)
)

type queueCollector struct {
	s    *Server
	mu   sync.Mutex
	at   time.Time
	last []prometheus.Metric
}

func newQueueCollector(s *Server) prometheus.Collector { return &queueCollector{s: s} }

// Describe implements prometheus.Collector.
func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTasks, descLimitUsed, descLimitMax, descWorkers, descScrape, descGroupsCapped} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) >= scrapeReuse {
		buf := make(chan prometheus.Metric, 256)
		var ms []prometheus.Metric
		done := make(chan struct{})
		go func() {
			for m := range buf {
				ms = append(ms, m)
			}
			close(done)
		}()
		c.read(buf)
		close(buf)
		<-done
		c.last, c.at = ms, time.Now()
	}
	for _, m := range c.last {
		ch <- m
	}
}

// read queries the database for the gauges.
func (c *queueCollector) read(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	began := time.Now()
	counts, err := c.s.in.TaskStateCounts(ctx, stateGroupsMax)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descTasks, err)
	} else {
		for _, g := range foldStateCounts(counts, c.s.cfg.MetricsProcesses) {
			ch <- prometheus.MustNewConstMetric(descTasks, prometheus.GaugeValue, float64(g.Count), g.Process, g.stage, g.State)
		}
		capped := 0.0
		if len(counts) == stateGroupsMax {
			capped = 1
		}
		ch <- prometheus.MustNewConstMetric(descGroupsCapped, prometheus.GaugeValue, capped)
	}
	limits, err := c.s.op.LimitList(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descLimitUsed, err)
	} else {
		for _, l := range foldLimits(limits, c.s.cfg.MetricsProcesses) {
			ch <- prometheus.MustNewConstMetric(descLimitUsed, prometheus.GaugeValue, float64(l.Running), l.Key)
			ch <- prometheus.MustNewConstMetric(descLimitMax, prometheus.GaugeValue, float64(l.Max), l.Key)
		}
	}
	workers, err := c.s.op.WorkerList(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descWorkers, err)
	} else {
		n := map[string]int{"alive": 0, "dead": 0, "stopped": 0}
		for _, w := range workers {
			n[workerState(w, c.s.cfg.DeadAfter)]++
		}
		for state, v := range n {
			ch <- prometheus.MustNewConstMetric(descWorkers, prometheus.GaugeValue, float64(v), state)
		}
	}
	ch <- prometheus.MustNewConstMetric(descScrape, prometheus.GaugeValue, time.Since(began).Seconds())
}

type stateGroup struct {
	dialect.StateCount
	stage string
}

// foldStateCounts keeps the top processes by task count and sums the rest
// into process "other" (stage "").
func foldStateCounts(counts []dialect.StateCount, top int) []stateGroup {
	total := map[string]int{}
	for _, c := range counts {
		total[c.Process] += c.Count
	}
	names := make([]string, 0, len(total))
	for n := range total {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if total[names[i]] != total[names[j]] {
			return total[names[i]] > total[names[j]]
		}
		return names[i] < names[j]
	})
	keep := map[string]bool{}
	for i, n := range names {
		if i < top {
			keep[n] = true
		}
	}
	var out []stateGroup
	other := map[string]int{}
	for _, c := range counts {
		if keep[c.Process] {
			out = append(out, stateGroup{StateCount: c, stage: fmt.Sprint(c.Order)})
			continue
		}
		other[c.State] += c.Count
	}
	states := make([]string, 0, len(other))
	for st := range other {
		states = append(states, st)
	}
	sort.Strings(states)
	for _, st := range states {
		out = append(out, stateGroup{StateCount: dialect.StateCount{Process: otherLabel, State: st, Count: other[st]}})
	}
	return out
}

// foldLimits keeps the top limits by slots in use and sums the rest as "other".
func foldLimits(ls []dialect.LimitInfo, top int) []dialect.LimitInfo {
	if len(ls) <= top {
		return ls
	}
	s := append([]dialect.LimitInfo(nil), ls...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].Running > s[j].Running })
	other := dialect.LimitInfo{Key: otherLabel}
	for _, l := range s[top:] {
		other.Running += l.Running
		other.Max += l.Max
	}
	return append(s[:top:top], other)
}

// otherLabel sums the processes (and limits) beyond the top N; the parentheses
// keep it apart from a process named "other".
const otherLabel = "(other)"
