// Package scripts holds the shell scripts the Makefile runs; this file tests
// ensure-postgres.sh in a sandbox: a PATH with only the basic tools (plus a
// recording apt-get where a case needs one) and no PostgreSQL on it.
package scripts

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// closedPort is a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// sandbox builds a bin directory with the tools the script needs and, as
// named, scripts standing in for id and apt-get.
func sandbox(t *testing.T, fakes map[string]string) string {
	t.Helper()
	bin := t.TempDir()
	for _, tool := range []string{"bash", "env", "seq", "sleep", "ls", "cat", "sed", "dirname"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("%s not found", tool)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range fakes {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!"+filepath.Join(bin, "bash")+"\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

func run(t *testing.T, bin string, env ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "bash"), "ensure-postgres.sh")
	cmd.Env = append([]string{"PATH=" + bin, "ENSURE_PG_ETC=" + filepath.Join(t.TempDir(), "none")}, env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

// TestEnsurePostgresNoServer: on a machine without PostgreSQL (issue 10, item
// 18), the script installs Debian's package when it may run apt-get as root,
// and otherwise fails saying the one command that does it.
func TestEnsurePostgresNoServer(t *testing.T) {
	dsn := "STAGEQ_POSTGRES_DSN=postgres://postgres@" + closedPort(t) + "/test?sslmode=disable"

	// Not root, no sudo, no apt-get: exit 1 and the command to run.
	code, out := run(t, sandbox(t, map[string]string{"id": "echo 1000"}), dsn)
	if code != 1 || !strings.Contains(out, "nothing was skipped") ||
		!(strings.Contains(out, "sudo ") || strings.Contains(out, "docker run")) {
		t.Errorf("no root: exit %d, output:\n%s", code, out)
	}

	// Root with apt-get: the package is installed (here apt-get records its
	// arguments); nothing starts in the sandbox, so it still fails, loudly.
	log := filepath.Join(t.TempDir(), "apt.log")
	apt := `echo "$@" >> ` + log
	code, out = run(t, sandbox(t, map[string]string{"id": "echo 0", "apt-get": apt}), dsn)
	calls, _ := os.ReadFile(log)
	if !strings.Contains(string(calls), "install -y -q postgresql") || code != 1 {
		t.Errorf("root with apt-get: exit %d, apt-get calls %q, output:\n%s", code, calls, out)
	}

	// STAGEQ_NO_INSTALL=1 never installs.
	os.Remove(log)
	code, _ = run(t, sandbox(t, map[string]string{"id": "echo 0", "apt-get": apt}), dsn, "STAGEQ_NO_INSTALL=1")
	if _, err := os.Stat(log); err == nil || code != 1 {
		t.Errorf("STAGEQ_NO_INSTALL=1: exit %d, apt-get ran: %v", code, err == nil)
	}
}

// TestEnsurePostgresReachable: with the server up (the machine's), exit 0 at once.
func TestEnsurePostgresReachable(t *testing.T) {
	if _, err := exec.LookPath("psql"); err != nil {
		t.Skip("no psql client here")
	}
	cmd := exec.Command("bash", "ensure-postgres.sh")
	cmd.Env = append(os.Environ(), "STAGEQ_NO_INSTALL=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("reachable server: %v\n%s", err, out)
	}
}
