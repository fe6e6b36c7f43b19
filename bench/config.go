package bench

import (
	"fmt"
	"time"
)

// Config is one run of the suite. NewConfig gives the full run's defaults and
// Quick shrinks them to a smoke test.
type Config struct {
	// PostgresDSN is the server the run creates its databases on ("" skips
	// PostgreSQL); SQLServerDSN likewise for SQL Server; SQLite runs unless NoSQLite.
	PostgresDSN  string
	SQLServerDSN string
	NoSQLite     bool
	// Scenarios limits the run to these names (drain, enqueue, river, pickup,
	// handoff, depth, idle, plancache); empty runs all. river is the peer
	// scenario, River's own burn-down of N jobs (PostgreSQL only), which the
	// drain rows are compared with.
	Scenarios []string

	// N is the task count of the drain and enqueue scenarios.
	N int
	// Concurrency is the drain worker's concurrency.
	Concurrency int
	// Runs repeats river, drain and enqueue, interleaved; the table shows medians.
	Runs int
	// SpreadProcesses is the number of processes drain/spread splits N over.
	SpreadProcesses int
	// PickupSamples is the number of single-task pickups; PickupGap the pause
	// before each, so the worker is idle when the task arrives.
	PickupSamples int
	PickupGap     time.Duration
	// HandoffPlans is the number of three-stage plans of the handoff scenario
	// (two handoffs each); HandoffWidth the tasks per stage.
	HandoffPlans int
	HandoffWidth int
	// DepthSmall and DepthLarge are the queue sizes of the depth scenario;
	// DepthOps the claims measured in each case.
	DepthSmall int
	DepthLarge int
	DepthOps   int
	// IdleSettle is how long the idle worker runs before measuring: its backoff
	// reaches the poll maximum, and its first prune pass (1 to 11 s after start,
	// then every 15 minutes) is behind it. IdleWindow is how long the
	// measurement lasts: a minute, so that the 2 s, 5 s and 10 s loops each
	// fall in it whole several times and the rate does not hang on where the
	// window's edges cut them.
	IdleSettle time.Duration
	IdleWindow time.Duration
	// Timeout bounds each scenario; a scenario that hits it reports what finished.
	Timeout time.Duration

	// CeilingScript is pg-ceiling.sh ("" skips the ceiling); CeilingArgs its
	// batch, clients and seconds.
	CeilingScript string
	CeilingArgs   []string
	// BinDir holds prebuilt enqueue and worker binaries; empty builds them from
	// SourceDir with go build.
	BinDir    string
	SourceDir string
	// RiverBin is a prebuilt River CLI (v0.47.0); empty builds it from the
	// module in SourceDir/bench/river.
	RiverBin string
	// PGLog is PostgreSQL's server log for statement counts; "" finds it.
	PGLog string

	// Progress receives progress lines (stderr); nil discards them.
	Progress func(format string, args ...any)
}

// NewConfig returns the full run's defaults (issue 6).
func NewConfig() Config {
	return Config{
		PostgresDSN:     "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
		N:               200_000,
		Concurrency:     64,
		Runs:            1,
		SpreadProcesses: 100,
		PickupSamples:   1000,
		PickupGap:       20 * time.Millisecond,
		HandoffPlans:    250,
		HandoffWidth:    2,
		DepthSmall:      10_000,
		DepthLarge:      1_000_000,
		DepthOps:        2000,
		IdleSettle:      15 * time.Second,
		IdleWindow:      60 * time.Second,
		Timeout:         5 * time.Minute,
		CeilingScript:   "../shared/bench/pg-ceiling.sh",
		CeilingArgs:     []string{"10", "8", "15"},
		SourceDir:       ".",
	}
}

// Quick shrinks the sizes to a smoke test that CI runs once; flags given after
// it still override.
func (c *Config) Quick() {
	c.N = 5000
	c.Runs = 1
	c.PickupSamples = 100
	c.PickupGap = 5 * time.Millisecond
	c.HandoffPlans = 20
	c.DepthLarge = 100_000
	c.DepthOps = 300
	c.IdleSettle = 5500 * time.Millisecond
	c.IdleWindow = 4 * time.Second
	c.Timeout = 10 * time.Second
	c.CeilingArgs = []string{"10", "8", "5"}
}

// Validate names the first field out of range.
func (c Config) Validate() error {
	known := map[string]bool{"drain": true, "enqueue": true, "river": true, "pickup": true, "handoff": true, "depth": true, "idle": true, "plancache": true}
	for _, s := range c.Scenarios {
		if !known[s] {
			return fmt.Errorf("bench: unknown scenario %q (drain, enqueue, river, pickup, handoff, depth, idle, plancache)", s)
		}
	}
	switch {
	case c.N < 1:
		return fmt.Errorf("bench: n must be >= 1, got %d", c.N)
	case c.Concurrency < 1 || c.Concurrency > 10000:
		return fmt.Errorf("bench: concurrency must be between 1 and 10000, got %d", c.Concurrency)
	case c.Runs < 1:
		return fmt.Errorf("bench: runs must be >= 1, got %d", c.Runs)
	case c.SpreadProcesses < 1:
		return fmt.Errorf("bench: spread processes must be >= 1, got %d", c.SpreadProcesses)
	case c.PickupSamples < 1:
		return fmt.Errorf("bench: pickup samples must be >= 1, got %d", c.PickupSamples)
	case c.HandoffPlans < 1 || c.HandoffWidth < 1:
		return fmt.Errorf("bench: handoff plans and width must be >= 1, got %d and %d", c.HandoffPlans, c.HandoffWidth)
	case c.DepthSmall < 2 || c.DepthLarge < c.DepthSmall:
		return fmt.Errorf("bench: depth sizes must satisfy 2 <= small <= large, got %d and %d", c.DepthSmall, c.DepthLarge)
	case c.DepthOps < 1 || c.DepthOps >= c.DepthSmall:
		return fmt.Errorf("bench: depth ops must be between 1 and the small depth (%d), got %d", c.DepthSmall, c.DepthOps)
	case c.IdleSettle < 0 || c.IdleWindow <= 0:
		return fmt.Errorf("bench: idle settle must be >= 0 and window > 0, got %s and %s", c.IdleSettle, c.IdleWindow)
	case c.Timeout <= 0:
		return fmt.Errorf("bench: timeout must be positive, got %s", c.Timeout)
	}
	return nil
}

// wants reports whether the run includes a scenario.
func (c Config) wants(s string) bool {
	if len(c.Scenarios) == 0 {
		return true
	}
	for _, x := range c.Scenarios {
		if x == s {
			return true
		}
	}
	return false
}

func (c Config) progress(format string, args ...any) {
	if c.Progress != nil {
		c.Progress(format, args...)
	}
}
