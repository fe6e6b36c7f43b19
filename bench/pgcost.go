package bench

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stageq/stageq/dialect"
)

// statsSettle is how long a drain waits before reading pg_stat_database: a
// PostgreSQL 15 backend flushes its counters at most once a second while busy,
// within a second of going idle, and at once when it exits.
const statsSettle = 1500 * time.Millisecond

// clockTicks is the unit of utime and stime in /proc/<pid>/stat (USER_HZ, 100 on
// every Linux architecture Go supports).
const clockTicks = 100

// settledXact waits for the database's backends to flush their counters, then
// reads its committed transactions.
func (r *runner) settledXact(ctx context.Context, t *target, db string) (int64, error) {
	select {
	case <-time.After(statsSettle):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return r.xactCommit(ctx, t, db)
}

// cpuMeter adds up the CPU time of the PostgreSQL backends connected to one
// database, read from /proc: the server must run on this machine, in this pid
// namespace. A backend's time is monotonic, so the meter keeps the last value
// seen per pid; a backend that exits between two samples loses what it spent
// after the last one (the drains here keep their connections to the end).
type cpuMeter struct {
	admin *sql.DB
	db    string

	mu   sync.Mutex
	base map[int]int64 // ticks per pid at start
	last map[int]int64 // ticks per pid at the latest sample

	stopLoop context.CancelFunc
	loopDone chan struct{}
}

// newCPUMeter checks that the server's backends are visible in /proc, by
// finding the admin connection's own backend there.
func newCPUMeter(ctx context.Context, admin *sql.DB, db string) (*cpuMeter, error) {
	var pid int
	if err := admin.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return nil, fmt.Errorf("pg_backend_pid: %w", err)
	}
	comm, _, err := procCPU(pid)
	if err != nil {
		return nil, fmt.Errorf("backend %d not visible in /proc (server on another machine or pid namespace): %w", pid, err)
	}
	if comm != "postgres" {
		return nil, fmt.Errorf("pid %d in /proc is %q, not the server's backend (another pid namespace)", pid, comm)
	}
	return &cpuMeter{admin: admin, db: db}, nil
}

// start takes the baseline and samples every 250 ms until stop, so that a
// backend that leaves early still counts up to its last sample.
func (m *cpuMeter) start(ctx context.Context) error {
	s, err := m.snapshot(ctx)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.base, m.last = s, maps.Clone(s)
	m.mu.Unlock()
	lctx, cancel := context.WithCancel(ctx)
	m.stopLoop, m.loopDone = cancel, make(chan struct{})
	go func() {
		defer close(m.loopDone)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-tick.C:
				m.sample(lctx)
			}
		}
	}()
	return nil
}

// sample records the backends' current CPU times; a failed sample is skipped
// (the next one, or the last one kept, stands in for it).
func (m *cpuMeter) sample(ctx context.Context) {
	s, err := m.snapshot(ctx)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last == nil {
		return
	}
	for pid, v := range s {
		if v > m.last[pid] {
			m.last[pid] = v
		}
	}
}

// stop ends the sampling and returns the CPU time spent since start: for a
// backend present at start its growth, for one connected later all of it.
func (m *cpuMeter) stop() time.Duration {
	if m.stopLoop != nil {
		m.stopLoop()
		<-m.loopDone
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return cpuSince(m.base, m.last)
}

// cpuSince is the CPU time between two samples of ticks per pid.
func cpuSince(base, last map[int]int64) time.Duration {
	var ticks int64
	for pid, v := range last {
		ticks += v - base[pid]
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// snapshot reads utime+stime of every backend connected to the database.
func (m *cpuMeter) snapshot(ctx context.Context) (map[int]int64, error) {
	pids, err := dialect.QueryAll(ctx, m.admin, dialect.KeepErr, "SELECT pid FROM pg_stat_activity WHERE datname = $1",
		func(r *sql.Rows, pid *int) error { return r.Scan(pid) }, m.db)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_activity: %w", err)
	}
	out := make(map[int]int64, len(pids))
	for _, pid := range pids {
		if _, ticks, err := procCPU(pid); err == nil { // gone since the query: skip it
			out[pid] = ticks
		}
	}
	return out, nil
}

// procCPU reads a process's command name and utime+stime in clock ticks.
func procCPU(pid int) (string, int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, err
	}
	return parseProcStat(string(b))
}

// parseProcStat takes apart a /proc/<pid>/stat line. The command name is in
// parentheses and may itself hold spaces and parentheses, so the fields are
// counted from the last ')'; utime and stime are fields 14 and 15.
func parseProcStat(s string) (string, int64, error) {
	lp, rp := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if lp < 0 || rp < lp {
		return "", 0, fmt.Errorf("proc stat: no command name in %q", s)
	}
	comm := s[lp+1 : rp]
	f := strings.Fields(s[rp+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return "", 0, fmt.Errorf("proc stat: %d fields after the command name", len(f))
	}
	utime, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("proc stat utime: %w", err)
	}
	stime, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("proc stat stime: %w", err)
	}
	return comm, utime + stime, nil
}

// costMeter measures what one scenario costs its PostgreSQL database:
// committed transactions from pg_stat_database, backend CPU from /proc, and the
// WAL the server wrote while the measured work ran. It is nil on the other
// dialects, and every method is then a no-op.
type costMeter struct {
	r      *runner
	t      *target
	db     string
	x0     int64
	xErr   error
	cpu    *cpuMeter
	cpuErr error
	cpuOn  bool // sampling
	cpuRan bool // started at least once
	cpuSum time.Duration
	// WAL positions at startCPU and stopCPU (pg_current_wal_insert_lsn): exact at
	// the moment read, unlike pg_stat_wal, which backends flush late.
	wal0, wal1 uint64
	walErr     error
	walStarted bool
	walEnded   bool
}

// beginCost waits for the database's counters to settle and reads the
// transactions so far; the CPU meter starts separately (startCPU), at the
// moment the measured work starts.
func (r *runner) beginCost(ctx context.Context, t *target, db string) *costMeter {
	if t.name != "postgres" {
		return nil
	}
	m := &costMeter{r: r, t: t, db: db}
	m.x0, m.xErr = r.settledXact(ctx, t, db)
	m.cpu, m.cpuErr = newCPUMeter(ctx, t.admin.DB(), db)
	return m
}

// startCPU takes the CPU baseline of the database's backends and the WAL
// position, at the moment the measured work starts.
func (m *costMeter) startCPU(ctx context.Context) {
	if m == nil || m.cpuOn {
		return
	}
	if !m.walStarted && m.walErr == nil {
		m.wal0, m.walErr = m.r.walPosition(ctx, m.t)
		m.walStarted = m.walErr == nil
	}
	if m.cpuErr != nil {
		return
	}
	if m.cpuErr = m.cpu.start(ctx); m.cpuErr == nil {
		m.cpuOn, m.cpuRan = true, true
	}
}

// stopCPU takes the last sample and the WAL position; call it while the
// measured clients are still connected, since an exited backend's time is no
// longer in /proc.
func (m *costMeter) stopCPU(ctx context.Context) {
	if m == nil {
		return
	}
	// The CPU sample first: backends that exit meanwhile lose their time.
	if m.cpuOn {
		m.cpu.sample(ctx)
		m.cpuSum = m.cpu.stop()
		m.cpuOn = false
	}
	// Read once: a failed read is not tried again later, over a longer window.
	if m.walStarted && !m.walEnded && m.walErr == nil {
		m.wal1, m.walErr = m.r.walPosition(ctx, m.t)
		if m.walErr == nil && m.wal1 < m.wal0 {
			m.walErr = fmt.Errorf("WAL position went back from %d to %d", m.wal0, m.wal1)
		}
		m.walEnded = m.walErr == nil
	}
}

// walPosition reads the server's current WAL insert position as a byte offset
// (pg_current_wal_insert_lsn: all WAL generated so far, written out or not).
func (r *runner) walPosition(ctx context.Context, t *target) (uint64, error) {
	var lsn string
	if err := t.admin.DB().QueryRowContext(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		return 0, fmt.Errorf("pg_current_wal_insert_lsn: %w", err)
	}
	return parseLSN(lsn)
}

// parseLSN turns PostgreSQL's text form of a WAL position, two hexadecimal
// halves "X/Y", into its 64-bit byte offset.
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("WAL position %q: no '/'", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("WAL position %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("WAL position %q: %w", s, err)
	}
	return h<<32 | l, nil
}

// end reads the transactions once the counters settle and returns the cost;
// own is the number of transactions the bench itself ran on the database in
// between (its completion polls), which are left out.
func (m *costMeter) end(ctx context.Context, own int64) dbCost {
	var c dbCost
	if m == nil {
		return c
	}
	m.stopCPU(ctx)
	if c.cpuOK = c.measured("PostgreSQL CPU", m.cpuErr, m.cpuRan); c.cpuOK {
		c.cpu = m.cpuSum
	}
	if c.walOK = c.measured("WAL", m.walErr, m.walEnded); c.walOK {
		c.wal = int64(m.wal1 - m.wal0)
	}
	x1, err := m.r.settledXact(ctx, m.t, m.db)
	switch {
	case m.xErr != nil:
		c.missing = append(c.missing, "transactions: "+m.xErr.Error())
	case err != nil:
		c.missing = append(c.missing, "transactions: "+err.Error())
	default:
		c.xacts, c.xactOK = x1-m.x0-own, true
	}
	return c
}

// dbCost is what a stretch of work cost one PostgreSQL database.
type dbCost struct {
	xacts  int64 // committed transactions, the bench's own left out
	xactOK bool
	cpu    time.Duration // backend CPU time
	cpuOK  bool
	// wal is the bytes of WAL the whole server wrote while the work ran:
	// nothing else writes during a bench run but autovacuum (off on the
	// development server) and the bench's own statements (reads only).
	wal     int64
	walOK   bool
	missing []string // why a figure is absent
}

// setExtras records the figures taken, whole, in row's extra fields.
func (c *dbCost) setExtras(row *Result) {
	if c.xactOK {
		row.set("xacts", c.xacts)
	}
	if c.cpuOK {
		row.set("pg_cpu_s", c.cpu.Seconds())
	}
	if c.walOK {
		row.set("wal_bytes", c.wal)
	}
}

// measured reports whether a figure was taken over the measured work, and
// otherwise records why not: its meter failed (err), or the work never
// started while it ran (!ran).
func (c *dbCost) measured(what string, err error, ran bool) bool {
	switch {
	case err != nil:
		c.missing = append(c.missing, what+": "+err.Error())
	case !ran:
		c.missing = append(c.missing, what+": the measured work never started")
	default:
		return true
	}
	return false
}

// perTask adds the per-task figures to a row's samples.
func (c dbCost) perTask(tasks int, a *acc) {
	if tasks <= 0 {
		return
	}
	if c.xactOK {
		a.xact = append(a.xact, float64(c.xacts)/float64(tasks))
	}
	if c.cpuOK {
		a.cpu = append(a.cpu, float64(c.cpu.Microseconds())/float64(tasks))
	}
	if c.walOK {
		a.wal = append(a.wal, float64(c.wal)/float64(tasks))
	}
}
