package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"time"
)

var ceilingLine = regexp.MustCompile(`ceiling: batch=(\d+) clients=(\d+) tasks_per_s=(\d+)`)

// ceiling runs pg-ceiling.sh against the server of pgDSN and returns its tasks/s.
// A missing script or pgbench is an answer, not an error of the run: the
// returned reason says why there is no ceiling.
func ceiling(ctx context.Context, script string, args []string, pgDSN string) (float64, string) {
	if script == "" {
		return 0, "ceiling not measured (no script given)"
	}
	if _, err := os.Stat(script); err != nil {
		return 0, fmt.Sprintf("ceiling not measured: %s missing", script)
	}
	if _, err := exec.LookPath("pgbench"); err != nil {
		return 0, "ceiling not measured: pgbench not on PATH"
	}
	env := os.Environ()
	// The script reads the libpq variables; point them at the DSN's server.
	if u, err := url.Parse(pgDSN); err == nil {
		if h := u.Hostname(); h != "" {
			env = append(env, "PGHOST="+h)
		}
		if p := u.Port(); p != "" {
			env = append(env, "PGPORT="+p)
		}
		if u.User != nil {
			env = append(env, "PGUSER="+u.User.Username())
			if pw, ok := u.User.Password(); ok {
				env = append(env, "PGPASSWORD="+pw)
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Sprintf("ceiling failed: %v: %s", err, lastLine(out))
	}
	m := ceilingLine.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Sprintf("ceiling: no result line in %q", lastLine(out))
	}
	v, _ := strconv.ParseFloat(string(m[3]), 64)
	return v, ""
}
