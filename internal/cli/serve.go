package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/stageq/stageq/dashboard"
)

// Environment variables that carry the dashboard's credentials: never flags,
// so they stay out of shell history and process listings, and never logged.
const (
	envDashToken    = "STAGEQ_DASHBOARD_TOKEN"
	envDashUser     = "STAGEQ_DASHBOARD_USER"
	envDashPassword = "STAGEQ_DASHBOARD_PASSWORD"
)

// newServeCommand builds `queuectl serve`: the web dashboard (package dashboard).
func newServeCommand(dsn *string) *cobra.Command {
	var (
		addr string
		cfg  dashboard.Config
		logs logFlags
	)
	cmd := &cobra.Command{
		Use:   "serve [--addr 127.0.0.1:8080]",
		Short: "Serve the web dashboard: processes, stage timelines, why tasks wait, actions, /metrics",
		Long: `Serves the dashboard on --addr until SIGTERM or SIGINT. It shows task bodies and
can change the queue, so it listens on loopback by default; on any other address it
requires credentials from the environment:
  ` + envDashToken + `             a bearer token (or the basic-auth password, any user)
  ` + envDashUser + ` / ` + envDashPassword + `   basic-auth credentials
Every action asks for confirmation and carries a per-session CSRF token;
--read-only turns actions off. /metrics serves queue gauges for Prometheus.`,
		Example: `  queuectl serve
  STAGEQ_DASHBOARD_TOKEN=$(cat /run/secrets/dash) queuectl serve --addr 0.0.0.0:8080 --read-only`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			cfg.Access = dashboard.Access{Token: os.Getenv(envDashToken), User: os.Getenv(envDashUser), Password: os.Getenv(envDashPassword)}
			if (cfg.Access.User == "") != (cfg.Access.Password == "") {
				return usageErrorf("set both %s and %s, or neither", envDashUser, envDashPassword)
			}
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return usageErrorf("--addr %q: give HOST:PORT (127.0.0.1:8080; port 0 picks a free one)", addr)
			}
			if !dashboard.IsLoopback(addr) && !cfg.Access.Required() {
				return usageErrorf("--addr %s is not a loopback address: set %s, or %s and %s, to require credentials",
					addr, envDashToken, envDashUser, envDashPassword)
			}
			for i, o := range cfg.Origins {
				u, err := url.Parse(o)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
					return usageErrorf("--origin %q: give the address the browser shows, scheme and host only (https://dash.example.com)", o)
				}
				cfg.Origins[i] = dashboard.NormalOrigin(u)
			}
			if cfg.DeadAfter <= 0 || cfg.Refresh <= 0 || cfg.MetricsProcesses <= 0 || cfg.RequestTimeout <= 0 {
				return usageErrorf("--dead-after, --refresh, --request-timeout and --metrics-processes must be positive")
			}
			host, _ := os.Hostname()
			cfg.Actor, cfg.Logger = fmt.Sprintf("dashboard@%s", host), log
			c, err := openClient(cmd.Context(), *dsn, false, log)
			if err != nil {
				return err
			}
			defer c.Close()
			srv, err := dashboard.New(c, cfg)
			if err != nil {
				return err
			}
			return serveHTTP(cmd.Context(), addr, srv, func(a net.Addr) {
				// The listening address on stdout, for scripts and tests that pass port 0.
				fmt.Fprintf(cmd.OutOrStdout(), "dashboard listening on http://%s/\n", a)
				log.Info().Str("addr", a.String()).Bool("read_only", cfg.ReadOnly).Bool("auth", cfg.Access.Required()).Msg("dashboard started")
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:8080", "listen address (loopback unless credentials are set in the environment)")
	f.BoolVar(&cfg.ReadOnly, "read-only", false, "show everything, change nothing")
	f.StringSliceVar(&cfg.Origins, "origin", nil, "behind a proxy that rewrites Host: the address browsers reach the dashboard at (https://dash.example.com), from which actions are then accepted")
	f.DurationVar(&cfg.DeadAfter, "dead-after", time.Minute, "a worker whose last heartbeat is older than this is dead")
	f.DurationVar(&cfg.Refresh, "refresh", 2*time.Second, "how often pages refresh their content")
	f.DurationVar(&cfg.RequestTimeout, "request-timeout", 15*time.Second, "a page whose database work takes longer fails (504); actions are not bounded")
	f.IntVar(&cfg.MetricsProcesses, "metrics-processes", 20, "processes with a label of their own on /metrics (the rest are process=\"(other)\")")
	logs.add(cmd)
	return cmd
}

// serveHTTP serves h on addr until ctx ends, then shuts down gracefully.
func serveHTTP(ctx context.Context, addr string, h http.Handler, started func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	if started != nil {
		started(ln.Addr())
	}
	return serveListener(ctx, ln, h)
}

// serveListener serves h on ln until ctx ends, then shuts down gracefully.
func serveListener(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
