package queue

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/stageq/stageq/dialect"
)

// Metrics are a worker's Prometheus metrics (`worker --metrics-addr`). Create
// them with NewMetrics and pass them in WorkerConfig.Metrics. Every method is
// safe on a nil *Metrics and then records nothing, so the worker calls them
// unconditionally, one line per event.
//
// Cardinality is bounded: the first MetricsOptions.MaxProcesses process names
// a worker sees keep a label of their own, later ones are counted as
// process="(other)"; kinds likewise, at most maxKinds. Durations carry the kind
// and outcome only.
type Metrics struct {
	reg       *prometheus.Registry
	claimed   *prometheus.CounterVec
	attempts  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	claimLat  prometheus.Histogram
	finishLat prometheus.Histogram
	leaseLost prometheus.Counter
	rescued   prometheus.Counter
	ticks     *prometheus.CounterVec
	processes labelCap
	kinds     labelCap

	runningOnce sync.Once
	ready       atomic.Pointer[func() bool] // stageq_worker_ready's source, once a worker sets it
}

// MetricsOptions bound the metrics' labels.
type MetricsOptions struct {
	// MaxProcesses is how many process names get a label of their own
	// (default 20); the rest are process="(other)". Negative: none (every
	// process is "(other)").
	MaxProcesses int
	// NoRuntimeCollectors leaves out the Go runtime and process collectors,
	// for an application that serves its own (prometheus.DefaultRegisterer
	// has them) and gathers these beside them: the same metric from two
	// registries fails the whole gather.
	NoRuntimeCollectors bool
}

const (
	maxKinds   = 50
	otherLabel = "(other)"
)

// NewMetrics builds a worker's metrics on a registry of their own, with the Go
// runtime and process collectors unless o leaves them out.
func NewMetrics(o MetricsOptions) *Metrics {
	if o.MaxProcesses == 0 {
		o.MaxProcesses = 20
	}
	latency := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		claimed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stageq_worker_claimed_total",
			Help: "Attempts this worker claimed, by task kind and process."}, []string{"kind", "process"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stageq_worker_attempts_total",
			Help: "Attempts this worker ended, by kind, process and outcome: succeeded, failed (retried or for good), released (handed back at shutdown), abandoned (the lease was lost, or the result could not be recorded)."},
			[]string{"kind", "process", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "stageq_worker_attempt_duration_seconds",
			Help:    "How long attempts ran, from claim to recorded end, by kind and outcome.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}}, []string{"kind", "outcome"}),
		claimLat: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stageq_worker_claim_duration_seconds",
			Help: "Latency of one claim statement (whatever it returned).", Buckets: latency}),
		finishLat: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stageq_worker_finish_duration_seconds",
			Help: "Latency of recording an attempt's end (batching included).", Buckets: latency}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "stageq_worker_lease_extensions_lost_total",
			Help: "Running attempts whose lease this worker could not extend (another worker may own the task now); each was cancelled."}),
		rescued: prometheus.NewCounter(prometheus.CounterOpts{Name: "stageq_worker_rescued_tasks_total",
			Help: "Tasks whose lease had expired (a dead or stalled worker's) that this worker returned to the queue."}),
		ticks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stageq_worker_schedule_ticks_total",
			Help: "Schedule ticks this worker handled, by outcome: enqueued, caught-up, missed, skipped, failed."}, []string{"outcome"}),
		processes: labelCap{max: o.MaxProcesses},
		kinds:     labelCap{max: maxKinds},
	}
	// Registered from the start, 0 until a worker says it claims: a worker
	// still waiting for its database is counted as not ready, not left out.
	readyGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stageq_worker_ready",
		Help: "1 while this worker claims tasks: registered, its heartbeats reaching the database, not stopping."},
		func() float64 {
			if ready := m.ready.Load(); ready != nil && (*ready)() {
				return 1
			}
			return 0
		})
	m.reg.MustRegister(m.claimed, m.attempts, m.duration, m.claimLat, m.finishLat, m.leaseLost, m.rescued, m.ticks, readyGauge)
	if !o.NoRuntimeCollectors {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// Registry is where the metrics are registered, for promhttp.HandlerFor or to
// add collectors of one's own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// observeRunning exports the worker's running-task count as a gauge (once).
func (m *Metrics) observeRunning(running func() int) {
	if m == nil {
		return
	}
	m.runningOnce.Do(func() {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stageq_worker_running_tasks",
			Help: "Attempts running on this worker now."}, func() float64 { return float64(running()) }))
	})
}

// observeReady makes the stageq_worker_ready gauge follow ready
// (Worker.Ready).
func (m *Metrics) observeReady(ready func() bool) {
	if m != nil {
		m.ready.Store(&ready)
	}
}

// claimedTasks records one claim: its latency and what it returned.
func (m *Metrics) claimedTasks(got []dialect.ClaimedTask, took time.Duration) {
	if m == nil {
		return
	}
	m.claimLat.Observe(took.Seconds())
	for _, t := range got {
		m.claimed.WithLabelValues(m.kinds.get(t.Kind), m.processes.get(t.Process)).Inc()
	}
}

// ended records how an attempt ended and how long it ran.
func (m *Metrics) ended(t dialect.ClaimedTask, outcome dialect.Outcome, took time.Duration) {
	if m == nil {
		return
	}
	kind := m.kinds.get(t.Kind)
	m.attempts.WithLabelValues(kind, m.processes.get(t.Process), string(outcome)).Inc()
	m.duration.WithLabelValues(kind, string(outcome)).Observe(took.Seconds())
}

// timeFinish starts timing the recording of an attempt's end; call the result
// when it is recorded (defer m.timeFinish()()).
func (m *Metrics) timeFinish() func() {
	if m == nil {
		return func() {}
	}
	began := time.Now()
	return func() { m.finishLat.Observe(time.Since(began).Seconds()) }
}

// leasesLost counts running attempts whose lease could not be extended.
func (m *Metrics) leasesLost(n int) {
	if m != nil && n > 0 {
		m.leaseLost.Add(float64(n))
	}
}

// rescuedTasks counts expired leases this worker returned to the queue.
func (m *Metrics) rescuedTasks(n int) {
	if m != nil && n > 0 {
		m.rescued.Add(float64(n))
	}
}

// tick counts a handled schedule tick.
func (m *Metrics) tick(outcome string) {
	if m != nil {
		m.ticks.WithLabelValues(outcome).Inc()
	}
}

// labelCap hands out label values: the first max distinct ones as they are,
// later ones as otherLabel, so a worker never exports more than max series
// per label however many processes it serves.
type labelCap struct {
	mu   sync.Mutex
	max  int
	seen map[string]bool
}

func (c *labelCap) get(v string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[v] {
		return v
	}
	if len(c.seen) >= c.max {
		return otherLabel
	}
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	c.seen[v] = true
	return v
}
