package cli

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// blackhole accepts TCP connections and never answers, like a server that hangs.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// TestConnectTimeout: against a server that accepts TCP and never answers, the
// commands give up after the connect timeout (flag or DSN) with a message that
// names the bound, never the password; a worker keeps retrying and logs it
// (issue 10, item 2).
func TestConnectTimeout(t *testing.T) {
	t.Parallel()
	addr := blackhole(t)
	pgFlag := "postgres://stageq:S3cret-pw@" + addr + "/x"
	pgDSN := pgFlag + "?connect_timeout=1"
	for _, c := range []struct {
		dsn  string
		args []string
		want string
	}{
		{pgFlag, []string{"enqueue", "--connect-timeout", "1s", "--order", "1", "SELECT 1"}, "bounded by 1s"},
		{pgFlag, []string{"--connect-timeout", "1s", "status"}, "bounded by 1s"},
		{pgDSN, []string{"logs"}, "bounded by 1s"},
		{pgDSN, []string{"enqueue", "SELECT 1"}, "bounded by 1s"},
		{"sqlserver://sa:S3cret-pw@" + addr + "?database=x", []string{"--connect-timeout", "1s", "tasks"}, "bounded by 1s"},
		{"sqlserver://sa:S3cret-pw@" + addr + "?database=x&connection+timeout=1", []string{"logs"}, "bounded by 1s"},
	} {
		args := c.args
		start := time.Now()
		code, _, stderr := qc(t, c.dsn, args...)
		if code != ExitFailure || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "S3cret") {
			t.Errorf("%v: exit %d after %s, stderr %q; want exit 1 saying %q", args, code, time.Since(start), stderr, c.want)
		}
	}
	code, _, stderr := qc(t, pgFlag, "--connect-timeout", "0s", "status")
	if code != ExitUsage || !strings.Contains(stderr, "--connect-timeout must be positive") {
		t.Errorf("--connect-timeout 0s: exit %d, stderr %q", code, stderr)
	}

	// A worker is a service: it waits for the database, logging each retry.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Execute(ctx, NewWorkerCommand(), []string{"--dsn", pgDSN, "--log-format", "json"}, &bytes.Buffer{}, &logs)
	}()
	deadline := time.After(45 * time.Second)
	for strings.Count(logs.String(), "retrying") < 2 {
		select {
		case code := <-done:
			t.Fatalf("worker exited with %d instead of retrying: %s", code, logs.String())
		case <-deadline:
			t.Fatalf("worker logged no second retry: %s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel() // as SIGTERM does: stopping is what was asked
	if code := <-done; code != ExitOK {
		t.Errorf("worker stopped while connecting: exit %d, want 0", code)
	}
	if out := logs.String(); !strings.Contains(out, `"attempt":2`) || !strings.Contains(out, "worker stopped before it connected") || strings.Contains(out, "S3cret") {
		t.Errorf("worker log: %s", out)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestBadDSNHidesPassword: a DSN that does not parse exits 2 and never prints its
// password, whatever the dialect (issue 10, item 1); an unknown scheme exits 2.
func TestBadDSNHidesPassword(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://postgres:S3cr%zzPW@127.0.0.1:5999/x",
		"postgresql://postgres:S3cr%zzPW@127.0.0.1:5999/x",
		"sqlserver://sa:S3cr%zzPW@127.0.0.1:5999?database=x",
		"sqlite://x.db?a=%zz&password=S3cr",
		"mysql://root:S3crPW@h/db",
	} {
		for _, args := range [][]string{{"enqueue", "--order", "1", "SELECT 1"}, {"status"}, {"migrate", "up"}} {
			code, out, stderr := qc(t, dsn, args...)
			if code != ExitUsage || strings.Contains(out+stderr, "S3cr") {
				t.Errorf("%s %v: exit %d, output %q", dsn, args, code, out+stderr)
			}
		}
	}
}

// TestHelpHidesTheEnvironmentsPassword: --help shows the default DSN, taken
// from STAGEQ_DSN, without its password.
func TestHelpHidesTheEnvironmentsPassword(t *testing.T) {
	t.Setenv("STAGEQ_DSN", "postgres://app:TopS3cret@db.internal/prod")
	for name, cmd := range map[string]func() *cobra.Command{
		"queuectl": NewQueuectlCommand, "enqueue": NewEnqueueCommand, "worker": NewWorkerCommand,
	} {
		var out, errb bytes.Buffer
		code := Execute(context.Background(), cmd(), []string{"--help"}, &out, &errb)
		if code != 0 || strings.Contains(out.String()+errb.String(), "TopS3cret") || !strings.Contains(out.String(), "db.internal") {
			t.Errorf("%s --help: exit %d, output %q; want the DSN shown without its password", name, code, out.String()+errb.String())
		}
	}
}
