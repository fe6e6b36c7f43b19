package conformance

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/lease"
)

// leaseProbeOnce builds the lease competitor helper (testdata/leaseprobe) next to
// the harness's binaries, once per test run.
var (
	leaseProbeOnce sync.Once
	leaseProbeErr  error
)

func leaseProbe(t *testing.T) string {
	t.Helper()
	path := filepath.Join(binDir, "leaseprobe")
	leaseProbeOnce.Do(func() {
		out, err := exec.Command("go", "build", "-o", path, "./testdata/leaseprobe").CombinedOutput()
		if err != nil {
			leaseProbeErr = fmt.Errorf("build leaseprobe: %v\n%s", err, out)
		}
	})
	if leaseProbeErr != nil {
		t.Fatal(leaseProbeErr)
	}
	return path
}

// leaseProc is a running leaseprobe whose stdout lines arrive on a channel.
type leaseProc struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
}

func startLeaseProbe(t *testing.T, db *testDB, args ...string) *leaseProc {
	t.Helper()
	cmd := exec.Command(leaseProbe(t), append(args[:1:1], append([]string{"--dsn", db.DSN}, args[1:]...)...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &leaseProc{cmd: cmd, lines: make(chan string, 100000), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		cmd.Wait()
		close(p.lines)
		close(p.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		<-p.done
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("leaseprobe %v stderr: %s", args, stderr.String())
		}
	})
	return p
}

// next waits for the probe's next line with a deadline.
func (p *leaseProc) next(t *testing.T, timeout time.Duration, what string) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatalf("leaseprobe exited before %s", what)
		}
		return l
	case <-time.After(timeout):
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
	return ""
}

// leaseRow reads a lease as the database sees it.
func leaseRow(t *testing.T, db *testDB, name string) dialect.LeaseInfo {
	t.Helper()
	ls, err := db.D.LeaseList(context.Background(), dialect.LeaseFilter{Name: name})
	if err != nil || len(ls) != 1 {
		t.Fatalf("lease %s: %v, %v", name, ls, err)
	}
	return ls[0]
}

// TestLeaseSemantics: tokens grow with every new holder, the holder re-acquires
// with its token (reentrant), a lost lease can neither be extended nor released,
// and expiry is the database's decision.
func TestLeaseSemantics(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		a := lease.New(db.D, lease.Options{Holder: "a"})
		b := lease.New(db.D, lease.Options{Holder: "b"})
		la, err := a.TryAcquire(ctx, "job", 10*time.Second)
		if err != nil || la.Token() != 1 {
			t.Fatalf("a acquires: %v, %v", la, err)
		}
		var held *lease.HeldError
		if _, err := b.TryAcquire(ctx, "job", time.Second); !errors.As(err, &held) || held.Holder != "a" || !errors.Is(err, lease.ErrNotAcquired) {
			t.Fatalf("b acquires a held lease: err = %v", err)
		}
		again, err := a.TryAcquire(ctx, "job", 10*time.Second)
		if err != nil || again.Token() != la.Token() {
			t.Fatalf("a re-acquires: %v, %v; want the same token", again, err)
		}
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lb, err := b.TryAcquire(ctx, "job", 300*time.Millisecond)
		if err != nil || lb.Token() != 2 {
			t.Fatalf("b acquires after release: %v, %v; want token 2", lb, err)
		}
		if err := la.Extend(ctx); !errors.Is(err, lease.ErrLost) {
			t.Errorf("a extends a released lease: %v", err)
		}
		if err := la.Release(ctx); !errors.Is(err, lease.ErrLost) {
			t.Errorf("a releases b's lease: %v", err)
		}
		if r := leaseRow(t, db, "job"); r.Holder != "b" || r.Token != 2 {
			t.Errorf("after a's stale release the lease is %+v", r)
		}
		// b stops extending: once the database's clock passes its expiry, a takes
		// over with a higher token and b's extension fails.
		waitFor(t, 5*time.Second, "b's lease to expire", func() bool { r := leaseRow(t, db, "job"); return !r.Held() })
		la2, err := a.TryAcquire(ctx, "job", 10*time.Second)
		if err != nil || la2.Token() != 3 {
			t.Fatalf("a acquires after b expired: %v, %v; want token 3", la2, err)
		}
		if err := lb.Extend(ctx); !errors.Is(err, lease.ErrLost) {
			t.Errorf("b extends after expiry: %v", err)
		}
		// An expired lease of one's own is not extended either, even unclaimed.
		lc, err := b.TryAcquire(ctx, "other", 150*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "the lease to expire", func() bool { return !leaseRow(t, db, "other").Held() })
		if err := lc.Extend(ctx); !errors.Is(err, lease.ErrLost) {
			t.Errorf("extend of an expired lease: %v", err)
		}
		if _, err := a.TryAcquire(ctx, "", time.Second); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("empty name: %v", err)
		}
		if _, err := a.TryAcquire(ctx, "x", time.Millisecond); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("tiny ttl: %v", err)
		}
	})
}

// TestLeaseCompetitors: 8 processes loop TryAcquire / work / Release on one lease.
// Over the intervals they record, no two overlap and the fencing tokens grow
// strictly in the order the holders held the lease. Each competitor stops once
// it has held the lease a set number of times, so a slow machine makes the test
// longer, not weaker; the time bound only catches a competitor that starves.
func TestLeaseCompetitors(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		holds := 8
		if schedFull() {
			holds = 16
		}
		dur := 2 * time.Minute
		var procs []*leaseProc
		for i := range 8 {
			procs = append(procs, startLeaseProbe(t, db, "loop", "--name", "shared", "--holder", fmt.Sprintf("c%d", i),
				"--ttl", "5s", "--holds", strconv.Itoa(holds), "--for", dur.String()))
		}
		type interval struct {
			holder     int
			token      int64
			start, end int64
		}
		var all []interval
		for i, p := range procs {
			select {
			case <-p.done:
			case <-time.After(dur + 30*time.Second):
				t.Fatalf("competitor %d did not finish", i)
			}
			if code := p.cmd.ProcessState.ExitCode(); code != 0 {
				t.Fatalf("competitor %d exited %d", i, code)
			}
			for l := range p.lines {
				f := strings.Fields(l)
				if len(f) != 4 || f[0] != "run" {
					t.Fatalf("competitor %d printed %q", i, l)
				}
				var iv interval
				iv.holder = i
				iv.token, _ = strconv.ParseInt(f[1], 10, 64)
				iv.start, _ = strconv.ParseInt(f[2], 10, 64)
				iv.end, _ = strconv.ParseInt(f[3], 10, 64)
				all = append(all, iv)
			}
		}
		slices.SortFunc(all, func(a, b interval) int { return int(a.start - b.start) })
		holders := map[int]int{}
		for i, iv := range all {
			holders[iv.holder]++
			if i == 0 {
				continue
			}
			prev := all[i-1]
			if iv.start <= prev.end {
				t.Errorf("overlap: c%d held from %d to %d, c%d from %d", prev.holder, prev.start, prev.end, iv.holder, iv.start)
			}
			if iv.token <= prev.token {
				t.Errorf("token did not grow: c%d had %d, then c%d got %d", prev.holder, prev.token, iv.holder, iv.token)
			}
		}
		for i := range procs {
			if holders[i] != holds {
				t.Errorf("competitor c%d held the lease %d times in %s, want %d: it starved", i, holders[i], dur, holds)
			}
		}
		t.Logf("%d intervals, holders %v, last token %d", len(all), holders, all[len(all)-1].token)
	})
}

// TestLeaseKilledHolder: a holder killed with SIGKILL mid-work is replaced only
// once its ttl has run out by the database's clock, and the heir's token is higher.
func TestLeaseKilledHolder(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		p := startLeaseProbe(t, db, "hold", "--name", "crash", "--holder", "victim", "--ttl", "2s")
		token, _ := strconv.ParseInt(strings.TrimPrefix(p.next(t, 20*time.Second, "the victim to acquire"), "acquired "), 10, 64)
		time.Sleep(800 * time.Millisecond) // let it extend at least once: the kill comes mid-work
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		expiry := leaseRow(t, db, "crash").ExpiresAt // no extension can follow the kill

		var got dialect.LeaseInfo
		attempts := 0
		waitFor(t, 10*time.Second, "the heir to acquire", func() bool {
			attempts++
			l, ok, err := db.D.LeaseTryAcquire(ctx, dialect.LeaseAcquireParams{Name: "crash", Holder: "heir", TTL: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			got = l
			return ok
		})
		if got.AcquiredAt.Before(expiry) {
			t.Errorf("heir acquired at %s, before the victim's expiry %s", got.AcquiredAt, expiry)
		}
		if got.AcquiredAt.Sub(expiry) > time.Second {
			t.Errorf("heir acquired %s after the expiry; should be at once", got.AcquiredAt.Sub(expiry))
		}
		if got.Token <= token {
			t.Errorf("heir's token %d, victim's %d: not higher", got.Token, token)
		}
		if attempts < 3 {
			t.Errorf("the heir got the lease on attempt %d: the victim's ttl was not waited for", attempts)
		}
	})
}

// TestLeasePausedHolder: a holder paused (SIGSTOP) past its ttl loses the lease
// to another; when it resumes (SIGCONT) its Extend fails, its work's context is
// cancelled at once, and its late Release does not free the new holder's lease.
func TestLeasePausedHolder(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		p := startLeaseProbe(t, db, "hold", "--name", "pause", "--holder", "sleeper", "--ttl", "1s")
		token, _ := strconv.ParseInt(strings.TrimPrefix(p.next(t, 20*time.Second, "the sleeper to acquire"), "acquired "), 10, 64)
		// Stopped right after acquiring, before its first extension (ttl/3 later), so
		// it holds no database lock while stopped.
		p.cmd.Process.Signal(syscall.SIGSTOP)
		waitFor(t, 10*time.Second, "the lease to expire", func() bool { return !leaseRow(t, db, "pause").Held() })
		heir := lease.New(db.D, lease.Options{Holder: "heir"})
		hl, err := heir.TryAcquire(ctx, "pause", 30*time.Second)
		if err != nil || hl.Token() <= token {
			t.Fatalf("heir acquires: %v, %v", hl, err)
		}
		p.cmd.Process.Signal(syscall.SIGCONT)
		resumed := time.Now()
		cancelled := p.next(t, 5*time.Second, "the sleeper's work to be cancelled")
		if took := time.Since(resumed); took > 2*time.Second {
			t.Errorf("cancelled %s after SIGCONT; want at once", took)
		}
		if !strings.HasPrefix(cancelled, "cancelled: ") || !strings.Contains(cancelled, "lease lost") {
			t.Errorf("sleeper says %q, want its context cancelled because the lease was lost", cancelled)
		}
		if ext := p.next(t, 5*time.Second, "the sleeper's Extend"); !strings.Contains(ext, "lease lost") {
			t.Errorf("sleeper's Extend after resuming: %q, want lease lost", ext)
		}
		if res := p.next(t, 5*time.Second, "Hold to return"); !strings.Contains(res, "lease lost") {
			t.Errorf("Hold returned %q, want lease lost", res)
		}
		<-p.done
		if code := p.cmd.ProcessState.ExitCode(); code != 4 {
			t.Errorf("sleeper exit code %d, want 4 (lease lost)", code)
		}
		if r := leaseRow(t, db, "pause"); r.Holder != "heir" || r.Token != hl.Token() || !r.Held() {
			t.Errorf("after the sleeper's stale release the lease is %+v, want the heir's", r)
		}
	})
}

// TestLeaseCLI: scripts acquire, list and release leases with queuectl; a lease
// held by another exits 6; bad input exits 2.
func TestLeaseCLI(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		q := func(args ...string) (int, string, string) {
			return runCLI(t, "queuectl", "", append([]string{"--dsn", db.DSN, "lease"}, args...)...)
		}
		code, stdout, stderr := q("acquire", "nightly", "--ttl", "1m", "--holder", "script-1")
		if code != 0 || strings.TrimSpace(stdout) != "1" {
			t.Fatalf("acquire: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		if code, _, stderr := q("acquire", "nightly", "--holder", "script-2"); code != 6 || !strings.Contains(stderr, "held by script-1") {
			t.Errorf("acquire of a held lease: exit %d, stderr %q; want 6 naming the holder", code, stderr)
		}
		if code, stdout, _ := q("list"); code != 0 || !strings.Contains(stdout, "script-1") {
			t.Errorf("list: exit %d, %q", code, stdout)
		}
		if code, _, stderr := q("release", "nightly", "--token", "7", "--holder", "script-1"); code != 1 || !strings.Contains(stderr, `lease lost: no longer held with this token: "script-1" holds it with token 1 now`) {
			t.Errorf("release with a wrong token: exit %d, %q", code, stderr)
		}
		// From another shell, whose default holder differs: the error names
		// the holder to give.
		if code, _, stderr := q("extend", "nightly", "--token", "1", "--holder", "other-shell"); code != 1 ||
			!strings.Contains(stderr, `held by "script-1" (token 1), not by "other-shell"; give the holder it was acquired with`) {
			t.Errorf("extend by another holder: exit %d, %q", code, stderr)
		}
		if code, _, stderr := q("release", "nightly", "--token", "1", "--holder", "script-1"); code != 0 {
			t.Errorf("release: exit %d, %q", code, stderr)
		}
		if code, _, stderr := q("extend", "nightly", "--token", "1", "--holder", "script-1"); code != 1 ||
			!strings.Contains(stderr, "it has no live holder (token 1 expired or was released)") {
			t.Errorf("extend after release: exit %d, %q", code, stderr)
		}
		if code, _, stderr := q("release", "no-such-lease", "--token", "1", "--holder", "script-1"); code != 1 ||
			!strings.Contains(stderr, "lease lost: no longer held with this token: no such lease") {
			t.Errorf("release of a lease never acquired: exit %d, %q", code, stderr)
		}
		if code, stdout, _ := q("acquire", "nightly", "--holder", "script-2"); code != 0 || strings.TrimSpace(stdout) != "2" {
			t.Errorf("acquire after release: exit %d, token %q; want 2", code, stdout)
		}
		if code, _, stderr := q("acquire", "x", "--ttl", "1ms"); code != 2 || !strings.Contains(stderr, "ttl must be") {
			t.Errorf("tiny ttl: exit %d, %q", code, stderr)
		}
	})
}
