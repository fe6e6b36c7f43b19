package dashboard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/stageq/stageq/dashboard"
	"github.com/stageq/stageq/internal/pgtest"
	"github.com/stageq/stageq/internal/queuetest"
)

// TestReadinessFollowsTheDatabase: /healthz and /readyz answer a caller
// without credentials (an orchestrator's probe) where every page asks for
// them; /readyz fails once the queue database is gone (dropped under the
// dashboard, its connections ended by the server) while /healthz, liveness,
// stays ok.
func TestReadinessFollowsTheDatabase(t *testing.T) {
	dsn := queuetest.Migrated(t, pgtest.NewDatabase(t, "stageq_dash"))
	t.Setenv("STAGEQ_DASHBOARD_TOKEN", "s3cret-token")
	base, _ := serve(t, dsn, "--addr", "127.0.0.1:0")
	get := func(path string) (int, string) { t.Helper(); return fetch(t, http.MethodGet, base+path) }
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/": 401, "/metrics": 401} {
		if code, body := get(path); code != want {
			t.Errorf("GET %s without credentials: %d %q, want %d", path, code, body, want)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} { // a load balancer's check may be a HEAD
		if code, _ := fetch(t, http.MethodHead, base+path); code != http.StatusOK {
			t.Errorf("HEAD %s without credentials: %d, want 200", path, code)
		}
	}

	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	admin := pgtest.Admin(t, "pgx", pgtest.Base())
	defer admin.Close()
	if _, err := admin.ExecContext(context.Background(), "DROP DATABASE "+strings.TrimPrefix(u.Path, "/")+" WITH (FORCE)"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := get("/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "the queue database does not answer") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz with the database gone: %d %q", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := get("/healthz"); code != 200 {
		t.Errorf("/healthz with the database gone: %d %q, want 200", code, body)
	}
}

// TestReadinessIgnoresACallerThatHangsUp: a probe whose caller went away
// (its request's context ended) does not leave a failure for the probes of
// the next second, which anyone could otherwise cause without credentials.
func TestReadinessIgnoresACallerThatHangsUp(t *testing.T) {
	dsn := queuetest.Migrated(t, "sqlite://"+filepath.Join(t.TempDir(), "q.db"))
	srv, err := dashboard.New(queuetest.Client(t, dsn), dashboard.Config{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/readyz", nil).WithContext(gone)
	srv.ServeHTTP(httptest.NewRecorder(), req)
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/readyz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("the probe after one whose caller hung up: %d %q, want 200", rec.Code, rec.Body.String())
	}
}
