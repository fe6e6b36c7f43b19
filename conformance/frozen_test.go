package conformance

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// freezingProxy forwards TCP connections to a server until frozen: then it
// keeps every connection open and accepts new ones, but passes nothing on —
// a database that stops answering mid-statement.
type freezingProxy struct {
	ln     net.Listener
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newFreezingProxy(t *testing.T, target string) *freezingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezingProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go p.pipe(s, c)
			go p.pipe(c, s)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

func (p *freezingProxy) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		for p.frozen.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		n, err := src.Read(buf)
		for p.frozen.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestFrozenDatabaseTimesOut (PostgreSQL; issue 10): the worker reaches its
// database through a proxy that freezes. Its statements then give up after
// --statement-timeout with an error that says so, instead of hanging; once
// the proxy thaws the worker runs tasks again.
func TestFrozenDatabaseTimesOut(t *testing.T) {
	ctx := context.Background()
	db := newTestDB(t, newPostgresDB(t))
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newFreezingProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	c, err := queue.Open(ctx, dsnWith(t, u.String(), "connect_timeout", "2"), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var logBuf bytes.Buffer
	logs := &syncWriter{w: &logBuf}
	cfg := fastConfig()
	cfg.Lease = 10 * time.Second
	cfg.Heartbeat = 3 * time.Second
	cfg.StatementTimeout = time.Second
	cfg.NoScheduler = true
	cfg.Logger = zerolog.New(logs)
	w, err := queue.NewWorker(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("work", func(context.Context, *queue.Task) error { return nil })
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); <-done }()

	succeeded := func(process string) bool {
		return len(db.logs(t, dialect.LogFilter{Process: process, Outcome: dialect.OutcomeSucceeded})) == 1
	}
	db.enqueue(t, "before", 1, stages.Task{Kind: "work", Body: "x"})
	waitFor(t, 30*time.Second, "a task to run before the freeze", func() bool { return succeeded("before") })

	proxy.frozen.Store(true)
	waitFor(t, time.Minute, "the worker to report the statement timeout", func() bool {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		return strings.Contains(logBuf.String(), "did not answer within the statement timeout")
	})
	proxy.frozen.Store(false)

	db.enqueue(t, "after", 1, stages.Task{Kind: "work", Body: "x"})
	waitFor(t, time.Minute, "a task to run after the thaw", func() bool { return succeeded("after") })
}
