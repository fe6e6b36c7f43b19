package bench

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// idle starts one worker process (the real worker binary) on an empty queue,
// waits IdleSettle for its polling backoff to reach its maximum, then measures
// over IdleWindow what it costs the database, and reads its resident memory.
//
// On PostgreSQL the cost is read three ways, each only if available: statements
// the server logged for the worker's database (log_statement = 'all' set on that
// database alone), calls counted by pg_stat_statements, and committed
// transactions in pg_stat_database (which a backend flushes up to ten seconds
// late, so the window must be long). SQLite keeps no such statistics.
func (r *runner) idle(ctx context.Context, t *target) Result {
	cfg := r.cfg
	res := Result{Dialect: t.name, Scenario: "idle", Concurrency: 4}
	dsn, c, drop, err := t.migrated(ctx, "idle")
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer drop()
	c.Close() // the worker process alone should talk to this database
	db := dbName(dsn)

	logOK := false
	if t.name == "postgres" && r.pgLog != nil {
		if _, err := t.admin.DB().ExecContext(ctx, "ALTER DATABASE "+db+" SET log_statement = 'all'"); err != nil {
			res.note("log_statement: %v", err)
		} else {
			logOK = true
		}
	}
	bin, err := r.binary(ctx, "worker")
	if err != nil {
		res.Error = err.Error()
		return res
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "--dsn", dsn, "--concurrency", "4", "--log-level", "warn", "--log-format", "json")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		res.Error = fmt.Sprintf("start worker: %v", err)
		return res
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		// SIGTERM is the worker's graceful stop; kill it only if it hangs.
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}()

	// wait lets d pass unless the run is cancelled or the worker exits first.
	wait := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case err := <-exited:
			exited <- err // for the deferred stop
			return fmt.Errorf("worker exited: %v: %s", err, lastLine(stderr.Bytes()))
		}
	}
	r.cfg.progress("%s: idle: settle %s, measure %s", t.name, cfg.IdleSettle, cfg.IdleWindow)
	if err := wait(cfg.IdleSettle); err != nil {
		res.Error = err.Error()
		return res
	}
	x0, xerr := r.xactCommit(ctx, t, db)
	var sampler *sql.DB
	var calls0 int64
	if t.name == "postgres" && r.pgss {
		if sampler, err = pgssSampler(ctx, dsn); err != nil {
			res.note("pg_stat_statements: %v", err)
		} else {
			defer sampler.Close()
			calls0, _ = pgssCalls(ctx, sampler)
		}
	}
	var off int64
	if logOK {
		if off, err = r.pgLog.offset(); err != nil {
			logOK = false
		}
	}
	start := time.Now()
	if err := wait(cfg.IdleWindow); err != nil {
		res.Error = err.Error()
		return res
	}
	window := time.Since(start)
	rss, rssErr := vmRSS(cmd.Process.Pid)
	x1, xerr1 := r.xactCommit(ctx, t, db)

	res.set("window_s", window.Seconds())
	var parts []string
	if logOK {
		stmts, err := r.pgLog.statements(db, off)
		if err != nil {
			res.note("server log: %v", err)
		} else {
			rate := float64(len(stmts)) / window.Seconds()
			res.set("statements_per_s", rate)
			res.set("statements", len(stmts))
			res.set("statement_kinds", distinct(stmts))
			parts = append(parts, fmt.Sprintf("%.2f stmt/s", rate))
		}
	} else if t.name == "postgres" {
		res.note("statement count unavailable: %s", r.pgLogWhy)
	}
	if t.name == "postgres" && xerr == nil && xerr1 == nil {
		rate := float64(x1-x0) / window.Seconds()
		res.set("xact_commit_per_s", rate)
		parts = append(parts, fmt.Sprintf("%.2f xact/s", rate))
	}
	if sampler != nil {
		if calls1, err := pgssCalls(ctx, sampler); err == nil {
			rate := float64(calls1-calls0) / window.Seconds()
			res.set("pgss_calls_per_s", rate)
			parts = append(parts, fmt.Sprintf("%.2f calls/s (pg_stat_statements)", rate))
		}
	} else if t.name == "postgres" {
		res.note("pg_stat_statements: %s", r.pgssWhy)
	}
	if t.name == "sqlite" {
		res.note("statements not countable on SQLite (no server statistics)")
	}
	if rssErr != nil {
		res.note("RSS: %v", rssErr)
	} else {
		res.set("rss_mb", rss)
		parts = append(parts, fmt.Sprintf("RSS %.1f MB", rss))
	}
	res.Summary = strings.Join(parts, ", ")
	res.note("worker binary, %s settle, %s window", cfg.IdleSettle, cfg.IdleWindow.Round(time.Second))
	return res
}

// xactCommit reads a database's committed transactions from pg_stat_database.
func (r *runner) xactCommit(ctx context.Context, t *target, db string) (int64, error) {
	if t.name != "postgres" {
		return 0, fmt.Errorf("no pg_stat_database on %s", t.name)
	}
	var n int64
	err := t.admin.DB().QueryRowContext(ctx, "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", db).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("pg_stat_database: %w", err)
	}
	return n, nil
}

// pgssSampler connects to the database to read pg_stat_statements, creating
// the extension's view there.
func pgssSampler(ctx context.Context, dsn string) (*sql.DB, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// pgssCalls sums the calls of the database's statements, leaving out the
// sampler's own (they name the view).
func pgssCalls(ctx context.Context, db *sql.DB) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query NOT ILIKE '%pg_stat_statements%'`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("pg_stat_statements: %w", err)
	}
	return n, nil
}

// vmRSS reads a process's resident set size in MB from /proc.
func vmRSS(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read VmRSS: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			fields := strings.Fields(rest) // "12345 kB"
			if len(fields) > 0 {
				kb, err := strconv.ParseFloat(fields[0], 64)
				if err != nil {
					return 0, fmt.Errorf("VmRSS %q: %w", rest, err)
				}
				return kb / 1024, nil
			}
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// lastLine is the last non-empty line of a command's output, for error messages.
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
