package dashboard

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
)

//go:embed templates/*.html static/*
var assets embed.FS

// Config configures the dashboard. Zero fields take the defaults named.
type Config struct {
	// ReadOnly hides and refuses every action.
	ReadOnly bool
	// Access is who may use it (auth.go).
	Access Access
	// DeadAfter: a worker whose last heartbeat is older is dead (default 1m).
	DeadAfter time.Duration
	// Refresh is how often pages poll for fresh content (default 2s).
	Refresh time.Duration
	// MetricsProcesses is how many processes get a label of their own on
	// /metrics; the rest are summed as process="other" (default 20).
	MetricsProcesses int
	// RequestTimeout bounds each page's work, so that a database that does
	// not answer (frozen, or a lock held) fails the page instead of holding it
	// open (default 15s). Actions are not bounded.
	RequestTimeout time.Duration
	// Origins are browser origins (scheme://host[:port], as NormalOrigin
	// writes them) from which actions are accepted besides the host a request
	// was sent to: the dashboard's public address behind a proxy that
	// rewrites Host.
	Origins []string
	// Actor names the dashboard in what it records (a schedule's run-now).
	Actor string
	// Logger receives one line per action (never a credential).
	Logger zerolog.Logger
}

// Server serves the dashboard: pages, actions and /metrics.
type Server struct {
	c     *queue.Client
	d     dialect.Dialect
	op    dialect.Operator
	in    dialect.Inspector
	cfg   Config
	key   []byte // HMAC key of the CSRF tokens, new at every start
	pages map[string]*template.Template
	mux   *http.ServeMux
	ready readiness // the readiness probe's last answer
}

// New builds the dashboard on an open client.
func New(c *queue.Client, cfg Config) (*Server, error) {
	if cfg.DeadAfter <= 0 {
		cfg.DeadAfter = time.Minute
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = 2 * time.Second
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 15 * time.Second
	}
	if cfg.MetricsProcesses <= 0 {
		cfg.MetricsProcesses = 20
	}
	if cfg.Actor == "" {
		cfg.Actor = "dashboard"
	}
	d := c.Dialect()
	op, err := dialect.AsOperator(d)
	if err != nil {
		return nil, err
	}
	in, err := dialect.AsInspector(d)
	if err != nil {
		return nil, err
	}
	s := &Server{c: c, d: d, op: op, in: in, cfg: cfg, key: make([]byte, 32), pages: map[string]*template.Template{}}
	rand.Read(s.key)
	if err := s.parse(); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newQueueCollector(s))
	static, _ := fs.Sub(assets, "static")

	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", s.page("processes", s.processes))
	m.HandleFunc("GET /process/{name}", s.page("process", s.process))
	m.HandleFunc("GET /process", s.page("process", s.process)) // ?name=, for names no path can carry
	m.HandleFunc("GET /tasks", s.page("tasks", s.tasks))
	m.HandleFunc("GET /task/{id}", s.page("task", s.task))
	m.HandleFunc("GET /logs", s.page("logs", s.logs))
	m.HandleFunc("GET /workers", s.page("workers", s.workers))
	m.HandleFunc("GET /limits", s.page("limits", s.limits))
	m.HandleFunc("GET /schedules", s.page("schedules", s.schedules))
	m.HandleFunc("GET /leases", s.page("leases", s.leases))
	m.HandleFunc("GET /api/why/{id}", s.whyJSON)
	m.HandleFunc("POST /action/{action}", s.action)
	m.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	m.HandleFunc("GET /readyz", s.readyz)
	s.mux = m
	return s, nil
}

// ServeHTTP checks access, then serves.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.Access.Required() && !loopbackHost(r.Host) {
		// Without credentials only the loopback address is served; a page of
		// another site whose name it rebinds to 127.0.0.1 reaches that address
		// too, but names its own host.
		http.Error(w, "this dashboard answers only to a loopback host name (localhost, 127.0.0.1, [::1]) unless it requires credentials", http.StatusMisdirectedRequest)
		return
	}
	if !s.cfg.Access.allows(r) && !probe(r) {
		w.Header().Set("WWW-Authenticate", `Basic realm="stageq", charset="UTF-8"`)
		http.Error(w, "credentials required", http.StatusUnauthorized)
		return
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		// Pages only: an action (cancelling a process of a million tasks) may
		// rightly take longer, and cut off it would roll back all it did.
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		r = r.WithContext(ctx)
	}
	h := w.Header()
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
	s.mux.ServeHTTP(w, r)
}

// probe: the health probes answer without credentials (a load balancer's or
// an orchestrator's check carries none); they tell nothing but up or down.
func probe(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && (r.URL.Path == "/healthz" || r.URL.Path == "/readyz")
}

// readyz is the readiness probe: the dashboard serves its pages only while
// the queue database answers, within a few seconds. /healthz, liveness, never
// asks the database: an outage restarting the dashboard would help nothing.
// Anyone may call it, so an answer serves the probes of the next second too:
// a flood of probes costs the database one SELECT 1 a second.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if err := s.ready.check(r.Context(), s); err != nil {
		http.Error(w, "not ready: the queue database does not answer", http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ready\n"))
}

// readiness is the last answer of the readiness probe's database check.
type readiness struct {
	mu  sync.Mutex
	at  time.Time
	err error
}

func (rd *readiness) check(ctx context.Context, s *Server) error {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if !rd.at.IsZero() && time.Since(rd.at) < time.Second {
		return rd.err
	}
	// Not the caller's context: a probe that hangs up must not leave
	// "canceled" as the answer for the next second's probes.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(s.cfg.RequestTimeout, 5*time.Second))
	defer cancel()
	var one int
	rd.err = s.d.DB().QueryRowContext(ctx, "SELECT 1").Scan(&one)
	rd.at = time.Now()
	if rd.err != nil {
		// The reason goes to the log, not to an unauthenticated caller.
		s.cfg.Logger.Warn().Err(rd.err).Msg("readiness probe: the queue database does not answer")
	}
	return rd.err
}

var funcs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05")
	},
	"tsp": func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000")
	},
	"ms":         func(t time.Time) string { return t.UTC().Format("15:04:05.000") },
	"dur":        fmtDur,
	"ago":        func(now, t time.Time) string { return fmtDur(now.Sub(t)) },
	"clip":       clip,
	"processURL": processURL,
	"deref": func(p *int) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	},
	"pct": func(n, total int) string {
		if total == 0 {
			return "0"
		}
		return fmt.Sprintf("%.2f", min(100, 100*float64(n)/float64(total)))
	},
	"f1":    func(f float64) string { return fmt.Sprintf("%.1f", f) },
	"add":   func(a, b int) int { return a + b },
	"sub":   func(a, b float64) float64 { return a - b },
	"add2":  func(a float64, b int) float64 { return a + float64(b) },
	"ptr":   func(t time.Time) *time.Time { return &t },
	"since": func(now, t time.Time) time.Duration { return t.Sub(now) },
	// act is the data of an action button (the "act" template).
	"act": func(csrf, ret, action string, target any, label string) map[string]any {
		return map[string]any{"CSRF": csrf, "R": ret, "A": action, "T": fmt.Sprint(target), "L": label}
	},
	"stagecounts": func(s dialect.StageStatus) map[string]int {
		return map[string]int{"Done": s.Done, "Running": s.Running, "Failed": s.Failed, "Total": s.Total()}
	},
	"slots": func(used, limit int) map[string]int {
		return map[string]int{"Done": 0, "Running": used, "Failed": 0, "Total": max(used, limit)}
	},
	"tasktable": func(v view, rows []taskRow, filtered any) map[string]any {
		f, _ := filtered.(bool)
		if s, ok := filtered.(string); ok {
			f = s != ""
		}
		return map[string]any{"CSRF": v.CSRF, "R": v.Path, "RO": v.ReadOnly, "Rows": rows, "Filtered": f}
	},
	// query builds a query string from pairs, leaving out empty values; it is
	// a template.URL so the template does not escape it a second time.
	"query": func(kv ...string) template.URL { return template.URL(pairs(kv...).Encode()) },
}

// processURL is a process page's address, with query pairs kv. A process
// is named in the path, except "." and "..": browsers resolve those segments
// (escaped ones too) before sending, so their page is asked for by query.
func processURL(name string, kv ...string) template.URL {
	q := pairs(kv...)
	base := "/process/" + url.PathEscape(name)
	if name == "." || name == ".." {
		base = "/process"
		q.Set("name", name)
	}
	if len(q) == 0 {
		return template.URL(base)
	}
	return template.URL(base + "?" + q.Encode())
}

// pairs is a query of key, value pairs, those with an empty value left out.
func pairs(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			v.Set(kv[i], kv[i+1])
		}
	}
	return v
}

func (s *Server) parse() error {
	names, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		return err
	}
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if base == "layout" || strings.HasPrefix(base, "_") {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/_*.html", n)
		if err != nil {
			return fmt.Errorf("dashboard template %s: %w", n, err)
		}
		s.pages[base] = t
	}
	return nil
}

// view is what every page template gets.
type view struct {
	Title    string
	Nav      string
	CSRF     string
	ReadOnly bool
	Database string // dialect.Dialect.Where: which queue this dashboard shows (render sets it)
	Refresh  int    // milliseconds; 0 turns polling off
	Flash    string
	Path     string
	Now      time.Time
	Data     any
}

// page wraps a handler that returns a page's data. A request with the header
// X-Stageq-Partial gets the content block only: the page's script polls with
// it and swaps the content in place, without reloading.
func (s *Server) page(name string, h func(r *http.Request) (string, any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		title, data, err := h(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		v := view{Title: title, Nav: name, CSRF: s.csrfToken(s.session(w, r)), ReadOnly: s.cfg.ReadOnly,
			Refresh: int(s.cfg.Refresh.Milliseconds()), Path: r.URL.RequestURI(), Now: time.Now(), Data: data}
		if c, err := r.Cookie("stageq_flash"); err == nil {
			v.Flash, _ = url.QueryUnescape(c.Value)
			http.SetCookie(w, &http.Cookie{Name: "stageq_flash", Path: "/", MaxAge: -1})
		}
		s.render(w, r, name, v, http.StatusOK)
	}
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, name string, v view, status int) {
	v.Database = s.d.Where()
	t := s.pages[name]
	block := "layout.html"
	if r.Header.Get("X-Stageq-Partial") != "" {
		block = "content"
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, block, v); err != nil {
		s.cfg.Logger.Error().Err(err).Str("page", name).Msg("dashboard: render")
		http.Error(w, "render failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	buf.WriteTo(w)
}

// fail shows an error page with the status its sentinel error implies.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, dialect.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, dialect.ErrInvalid), errors.Is(err, errBadInput):
		status = http.StatusBadRequest
	case errors.Is(err, dialect.ErrWrongState):
		status = http.StatusConflict
	case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() != nil:
		status = http.StatusGatewayTimeout
		err = fmt.Errorf("the database did not answer within %s (--request-timeout): %w", s.cfg.RequestTimeout, err)
	}
	v := view{Title: "Error", CSRF: s.csrfToken(s.session(w, r)), ReadOnly: s.cfg.ReadOnly, Path: r.URL.RequestURI(),
		Now: time.Now(), Data: map[string]any{"Status": status, "Error": err.Error(), "Back": backURL(r)}}
	s.render(w, r, "error", v, status)
}

var errBadInput = errors.New("bad input")

// backURL is a same-site path to return to: the form's return field or the
// Referer's path, never another host.
func backURL(r *http.Request) string {
	ret := r.FormValue("return")
	if ret == "" {
		if u, err := url.Parse(r.Referer()); err == nil && u.Host == r.Host {
			ret = u.RequestURI()
		}
	}
	if !strings.HasPrefix(ret, "/") || strings.HasPrefix(ret, "//") || strings.Contains(ret, `\`) {
		return "/"
	}
	return ret
}
