package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
)

// BinDir holds the PostgreSQL server binaries (initdb, pg_ctl) a private
// cluster is made with: STAGEQ_PG_BINDIR, or the newest of Debian's
// /usr/lib/postgresql/<major>/bin.
func BinDir() string {
	if v := os.Getenv("STAGEQ_PG_BINDIR"); v != "" {
		return v
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	newest, major := "/usr/lib/postgresql/15/bin", 0
	for _, d := range dirs {
		bin := filepath.Dir(d)
		if m, err := strconv.Atoi(filepath.Base(filepath.Dir(bin))); err == nil && m > major {
			newest, major = bin, m
		}
	}
	return newest
}

// Cluster is a PostgreSQL server of one test's own, for a test that stops,
// restarts or crashes the server: the shared one (Base) must never be. Its data
// directory, log and unix socket are in a temporary directory; it listens on
// 127.0.0.1 on a free port, trusts every connection, and runs with fsync off.
type Cluster struct {
	Dir  string // holds data/, the socket and server.log
	Port int
	// asUser runs a command as the cluster's owner: "runuser -u postgres --"
	// when the test runs as root (initdb and postgres refuse root), else none.
	asUser []string
}

// StartCluster initdbs and starts a private cluster, stopping it (immediately)
// and removing its directory when the test ends. Where the server binaries or,
// under root, the postgres OS user are missing it skips the test saying so, or
// fails it under CI=true, where a test must never be skipped silently.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	unavailable := func(format string, args ...any) {
		tb.Helper()
		msg := "private PostgreSQL cluster: " + fmt.Sprintf(format, args...)
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := os.Stat(filepath.Join(BinDir(), b)); err != nil {
			unavailable("no %s in %s (set STAGEQ_PG_BINDIR): %v", b, BinDir(), err)
		}
	}
	c := &Cluster{}
	owner := -1 // the directory's new owner's uid, if not the test's
	var group int
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			unavailable("running as root, which initdb refuses, and no postgres OS user to run it as: %v", err)
		}
		if _, err := exec.LookPath("runuser"); err != nil {
			unavailable("running as root, which initdb refuses, and no runuser to run it as postgres: %v", err)
		}
		c.asUser = []string{"runuser", "-u", "postgres", "--"}
		owner, _ = strconv.Atoi(u.Uid)
		group, _ = strconv.Atoi(u.Gid)
	}
	dir, err := os.MkdirTemp("", "stageq-pg-")
	if err != nil {
		tb.Fatalf("private cluster: %v", err)
	}
	c.Dir = dir
	tb.Cleanup(func() { os.RemoveAll(c.Dir) })
	if owner >= 0 {
		if err := os.Chown(dir, owner, group); err != nil {
			tb.Fatalf("private cluster: chown %s to postgres: %v", dir, err)
		}
	}
	c.Port = freePort(tb)
	c.run(tb, filepath.Join(BinDir(), "initdb"), "-D", c.data(), "-U", "postgres", "--auth=trust",
		"--no-sync", "-E", "UTF8", "--locale=C")
	c.Start(tb)
	tb.Cleanup(func() {
		// Immediate: the test is over, and whatever still connects to it
		// (a worker process being killed) must not hold the stop up.
		cmd := c.command(filepath.Join(BinDir(), "pg_ctl"), "stop", "-D", c.data(), "-m", "immediate", "-w")
		cmd.Run()
	})
	return c
}

// DSN is the URL of database name on the cluster, as the superuser postgres.
func (c *Cluster) DSN(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, name)
}

// Start starts the stopped cluster and waits until it accepts connections.
func (c *Cluster) Start(tb testing.TB) {
	tb.Helper()
	c.pgctl(tb, "start", "-o", c.options())
}

// Stop stops the cluster with pg_ctl's mode (smart, fast or immediate: a
// crash, which the next start recovers from).
func (c *Cluster) Stop(tb testing.TB, mode string) {
	tb.Helper()
	c.pgctl(tb, "stop", "-m", mode)
}

// Restart restarts the cluster with pg_ctl's mode (fast: every session is
// terminated and the server shuts down cleanly; immediate: the server is
// crashed and recovers from its WAL at the start) and waits until it accepts
// connections again.
func (c *Cluster) Restart(tb testing.TB, mode string) {
	tb.Helper()
	c.pgctl(tb, "restart", "-m", mode, "-o", c.options())
}

func (c *Cluster) pgctl(tb testing.TB, args ...string) {
	tb.Helper()
	all := append([]string{"-D", c.data(), "-l", filepath.Join(c.Dir, "server.log"), "-w", "-t", "60"}, args...)
	c.run(tb, filepath.Join(BinDir(), "pg_ctl"), all...)
}

func (c *Cluster) options() string {
	return fmt.Sprintf("-c fsync=off -c listen_addresses=127.0.0.1 -p %d -k %s", c.Port, c.Dir)
}

func (c *Cluster) data() string { return filepath.Join(c.Dir, "data") }

func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	all := append(append(append([]string{}, c.asUser...), name), args...)
	return exec.Command(all[0], all[1:]...)
}

// run runs a server command as the cluster's owner, failing the test with its
// output and the server's log on an error.
func (c *Cluster) run(tb testing.TB, name string, args ...string) {
	tb.Helper()
	out, err := c.command(name, args...).CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(c.Dir, "server.log"))
		tb.Fatalf("private cluster: %s %v: %v\n%s\nserver log:\n%s", filepath.Base(name), args, err, out, log)
	}
}

// freePort is a TCP port on 127.0.0.1 that nothing listened on a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("private cluster: a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
