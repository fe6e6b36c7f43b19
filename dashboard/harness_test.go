package dashboard_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/microsoft/go-mssqldb" // "sqlserver" for the admin connection

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/internal/cli"
	"github.com/stageq/stageq/internal/queuetest"
	"github.com/stageq/stageq/queue"
)

// eachDatabase runs fn on a fresh, migrated SQLite file and PostgreSQL
// database, one after the other (a browser per run is heavy enough).
func eachDatabase(t *testing.T, fn func(t *testing.T, dsn string)) {
	queuetest.EachDatabase(t, "stageq_dash", false, fn)
}

// eachQueue is eachDatabase for the tests that set up or read the queue
// themselves: fn also gets a client on the database, closed when the test ends.
func eachQueue(t *testing.T, fn func(t *testing.T, dsn string, c *queue.Client)) {
	eachDatabase(t, withClient(fn))
}

// eachDialect is eachQueue plus SQL Server when STAGEQ_SQLSERVER_DSN names
// one (a login that may CREATE DATABASE), for the tests of the dialects' reads.
func eachDialect(t *testing.T, fn func(t *testing.T, dsn string, c *queue.Client)) {
	eachQueue(t, fn)
	t.Run("sqlserver", func(t *testing.T) {
		base := os.Getenv("STAGEQ_SQLSERVER_DSN")
		if base == "" {
			t.Skip("STAGEQ_SQLSERVER_DSN is not set: the SQL Server reads are not run")
		}
		withClient(fn)(t, queuetest.Migrated(t, newSQLServerDB(t, base)))
	})
}

// withClient opens a client on the database fn runs on.
func withClient(fn func(t *testing.T, dsn string, c *queue.Client)) func(t *testing.T, dsn string) {
	return func(t *testing.T, dsn string) {
		fn(t, dsn, queuetest.Client(t, dsn))
	}
}

// newSQLServerDB creates a database on the server of base and drops it afterwards.
func newSQLServerDB(t *testing.T, base string) string {
	t.Helper()
	admin, err := sql.Open("sqlserver", base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var version string
	if err := admin.QueryRow("SELECT @@VERSION").Scan(&version); err != nil {
		t.Fatalf("SQL Server at %s: %v", dialect.Redact(base), err)
	}
	t.Logf("SQL Server: %.60s", version)
	name := fmt.Sprintf("stageq_dash_%d_%08x", os.Getpid(), rand.Uint32())
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if a, err := sql.Open("sqlserver", base); err == nil {
			a.Exec("DROP DATABASE " + name)
			a.Close()
		}
	})
	u, _ := url.Parse(base)
	q := u.Query()
	q.Set("database", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// serve runs `queuectl serve` in-process on a free loopback port, exactly as
// the command line does, and returns its base URL and exit code channel.
func serve(t *testing.T, dsn string, args ...string) (string, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	argv := append([]string{"--dsn", dsn, "serve", "--log-format", "json"}, args...)
	go func() {
		code := cli.Execute(ctx, cli.NewQueuectlCommand(), argv, pw, io.Discard)
		pw.Close()
		done <- code
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	stopped := false
	var code int
	stop := func() int {
		if !stopped {
			stopped = true
			cancel()
			code = <-done
		}
		return code
	}
	t.Cleanup(func() { stop() })
	select {
	case l := <-lines:
		base, ok := strings.CutPrefix(l, "dashboard listening on ")
		if !ok {
			t.Fatalf("serve printed %q", l)
		}
		return strings.TrimSuffix(base, "/"), stop
	case code := <-done:
		t.Fatalf("serve exited with %d before listening", code)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start within 30s")
	}
	return "", stop
}

// waitFor polls cond every 50ms until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serveExit runs `queuectl serve` expecting it to refuse to start, and returns
// its exit code.
func serveExit(t *testing.T, dsn string, args ...string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out strings.Builder
	return cli.Execute(ctx, cli.NewQueuectlCommand(), append([]string{"--dsn", dsn, "serve"}, args...), &out, io.Discard)
}

// fetch sends a request without credentials and returns its status and body,
// failing the test when no answer comes.
func fetch(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
