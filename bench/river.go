package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The peer scenario runs River's own benchmark, `river bench --num-total-jobs N`
// of River's CLI v0.47.0: it inserts N no-op jobs, starts a client of 2,000
// workers and reports the jobs per second from the client's start to the last
// job worked. The CLI is built from the separate module in bench/river, so the
// product module never depends on River.

// riverWorkers is River's bench's worker count (hard-coded in v0.47.0).
const riverWorkers = 2000

// riverSummaryLine is the last line `river bench` prints:
//
//	bench: total jobs worked [     200000 ], total jobs inserted [     200000 ], overall job/sec [    21345.6 ], running 9.37s
var riverSummaryLine = regexp.MustCompile(`total jobs worked \[\s*(\d+)\s*\], total jobs inserted \[\s*(\d+)\s*\], overall job/sec \[\s*(\S+)\s*\], running (\S+)`)

// riverStartLine is River's info log line (with --verbose) between the insert
// of every job and the client's start: where the timed part begins.
const riverStartLine = "Minimum jobs inserted; starting iteration"

var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// riverSummary is what `river bench` reported.
type riverSummary struct {
	worked, inserted int64
	perSec           float64
	running          time.Duration
}

// parseRiverSummary reads River's summary line; ok is false for any other line.
func parseRiverSummary(line string) (riverSummary, bool, error) {
	m := riverSummaryLine.FindStringSubmatch(ansiEscape.ReplaceAllString(line, ""))
	if m == nil {
		return riverSummary{}, false, nil
	}
	var s riverSummary
	var err error
	if s.worked, err = strconv.ParseInt(m[1], 10, 64); err != nil {
		return s, true, fmt.Errorf("river summary: jobs worked %q: %w", m[1], err)
	}
	if s.inserted, err = strconv.ParseInt(m[2], 10, 64); err != nil {
		return s, true, fmt.Errorf("river summary: jobs inserted %q: %w", m[2], err)
	}
	if s.worked == 0 {
		// With nothing worked its clock has no end: the figures are noise.
		return s, true, errors.New("river summary: no job worked")
	}
	if s.perSec, err = strconv.ParseFloat(m[3], 64); err != nil || s.perSec <= 0 {
		return s, true, fmt.Errorf("river summary: job/sec %q is not a positive number", m[3])
	}
	if s.running, err = time.ParseDuration(m[4]); err != nil || s.running <= 0 {
		return s, true, fmt.Errorf("river summary: running %q is not a positive duration", m[4])
	}
	return s, true, nil
}

// riverRun is one peer run.
type riverRun struct {
	sum      riverSummary
	cost     dbCost
	timedOut bool
}

// river runs River's burn-down of cfg.N jobs on a database of its own.
func (r *runner) river(ctx context.Context, t *target) (riverRun, error) {
	bin, err := r.riverBinary(ctx)
	if err != nil {
		return riverRun{}, err
	}
	dsn, drop, err := t.createDB(ctx, "river")
	if err != nil {
		return riverRun{}, err
	}
	defer drop()
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	out, err := exec.CommandContext(mctx, bin, "migrate-up", "--database-url", dsn).CombinedOutput()
	cancel()
	if err != nil {
		return riverRun{}, fmt.Errorf("river migrate-up: %w: %s", err, lastLine(out))
	}

	meter := r.beginCost(ctx, t, dbName(dsn))
	bctx, cancelBound := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancelBound()
	cmd := exec.CommandContext(bctx, bin, "bench", "--verbose", "--database-url", dsn, "--num-total-jobs", strconv.Itoa(r.cfg.N))
	// An interrupt makes River stop its client and still print its summary;
	// a kill follows if it does not exit.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return riverRun{}, fmt.Errorf("start river bench: %w", err)
	}

	var (
		run     riverRun
		found   bool
		sumErr  error
		tail    []string
		scanned sync.WaitGroup
	)
	scanned.Add(1)
	go func() {
		defer scanned.Done()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			tail = append(tail, line)
			if len(tail) > 5 {
				tail = tail[1:]
			}
			if strings.Contains(line, riverStartLine) {
				meter.startCPU(ctx)
			}
			// River prints the summary before it stops its client, so its
			// backends are still there to be read.
			if s, ok, err := parseRiverSummary(line); ok {
				meter.stopCPU(ctx)
				run.sum, found, sumErr = s, true, err
			}
		}
		io.Copy(io.Discard, pr)
	}()
	waitErr := cmd.Wait()
	pw.Close()
	scanned.Wait()
	run.timedOut = bctx.Err() != nil && ctx.Err() == nil
	run.cost = meter.end(ctx, 0)

	last := strings.Join(tail, " | ")
	switch {
	case !found && waitErr != nil:
		return run, fmt.Errorf("river bench: %w: %s", waitErr, last)
	case !found:
		return run, fmt.Errorf("river bench: no summary line in its output: %s", last)
	case sumErr != nil:
		return run, sumErr
	case waitErr != nil && !run.timedOut:
		return run, fmt.Errorf("river bench: %w: %s", waitErr, last)
	}
	return run, nil
}
