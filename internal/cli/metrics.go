package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/stageq/stageq/queue"
)

// metricsFlags are the worker's --metrics-addr and --metrics-processes; the
// address serves the worker's probes too.
type metricsFlags struct {
	addr      string
	processes int
	// ready is the worker's readiness (queue.Worker.Ready) once it exists;
	// until then the worker is connecting.
	ready atomic.Pointer[func() error]
}

// errConnecting: the worker is waiting for the queue database (openWithRetry).
var errConnecting = errors.New("connecting to the queue database")

// setReady hands the probes the worker's readiness.
func (m *metricsFlags) setReady(ready func() error) { m.ready.Store(&ready) }

func (m *metricsFlags) add(f *pflag.FlagSet) {
	f.StringVar(&m.addr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics, and the probes /healthz (the process answers) and /readyz (it claims tasks), for example 127.0.0.1:9090; off by default")
	f.IntVar(&m.processes, "metrics-processes", 20, "process names with a label of their own in the metrics; later ones count as process=\"(other)\"")
}

// start serves the worker's metrics until ctx ends; nil when --metrics-addr is
// not set. The listener is opened before it returns, so a bad address fails
// the command at once.
func (m *metricsFlags) start(ctx context.Context, log zerolog.Logger) (*queue.Metrics, error) {
	if m.addr == "" {
		return nil, nil
	}
	if m.processes < 0 {
		return nil, usageErrorf("--metrics-processes must not be negative, got %d", m.processes)
	}
	opts := queue.MetricsOptions{MaxProcesses: m.processes}
	if m.processes == 0 {
		opts.MaxProcesses = -1
	}
	metrics := queue.NewMetrics(opts)
	ln, err := net.Listen("tcp", m.addr)
	if err != nil {
		return nil, usageErrorf("--metrics-addr %s: %v", m.addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics.Registry(), promhttp.HandlerOpts{}))
	// Liveness never depends on the database: an outage restarting every
	// worker would help nothing. Readiness says whether this worker claims.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		err := errConnecting
		if ready := m.ready.Load(); ready != nil {
			err = (*ready)()
		}
		if err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	go func() {
		if err := serveListener(ctx, ln, mux); err != nil {
			log.Error().Err(err).Msg("metrics server stopped")
		}
	}()
	log.Info().Str("addr", ln.Addr().String()).Msg(fmt.Sprintf("metrics at http://%s/metrics, probes at /healthz and /readyz", ln.Addr()))
	return metrics, nil
}
