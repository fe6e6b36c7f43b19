package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// riverFormat is the summary format of River v0.47.0's cmd/river/riverbench.
const riverFormat = "bench: total jobs worked [ %10d ], total jobs inserted [ %10d ], overall job/sec [ %10.1f ], running %s\n"

func TestParseRiverSummary(t *testing.T) {
	line := fmt.Sprintf(riverFormat, 200000, 200000, 21345.6, 9369823417*time.Nanosecond)
	s, ok, err := parseRiverSummary(line)
	if !ok || err != nil {
		t.Fatalf("parse %q: ok=%v err=%v", line, ok, err)
	}
	if s.worked != 200000 || s.inserted != 200000 || s.perSec != 21345.6 || s.running != 9369823417*time.Nanosecond {
		t.Errorf("parse %q = %+v", line, s)
	}

	// The CLI's logger colours its output; the summary is a plain Printf, but
	// a colour code around it must not hide it.
	s, ok, err = parseRiverSummary("\x1b[2m" + fmt.Sprintf(riverFormat, 5000, 5000, 4100.5, 1219*time.Millisecond) + "\x1b[0m")
	if !ok || err != nil || s.worked != 5000 || s.perSec != 4100.5 {
		t.Errorf("coloured line: %+v ok=%v err=%v", s, ok, err)
	}

	for _, other := range []string{
		"bench: jobs worked [       8000 ], inserted [          0 ], job/sec [     4000.0 ] [2s]",
		"time=12:00:00 INF Benchmarker: Minimum jobs inserted; starting iteration",
		"",
	} {
		if _, ok, _ := parseRiverSummary(other); ok {
			t.Errorf("%q taken for the summary", other)
		}
	}

	// Nothing worked: River's clock ran from its start to the zero time, so the
	// figures are meaningless and must not become a rate.
	zero := fmt.Sprintf(riverFormat, 0, 5000, -0.0, time.Duration(-1<<63))
	if _, ok, err := parseRiverSummary(zero); !ok || err == nil {
		t.Errorf("zero jobs worked: ok=%v err=%v, want the summary refused", ok, err)
	}
}

// TestRiverPeer runs the peer scenario end to end with a prebuilt River CLI
// (STAGEQ_RIVER_BIN; building it takes a minute, so the suite does not).
func TestRiverPeer(t *testing.T) {
	bin := os.Getenv("STAGEQ_RIVER_BIN")
	if bin == "" {
		t.Skip("STAGEQ_RIVER_BIN is not set: build it with `cd bench/river && go build -o /tmp/river github.com/riverqueue/river/cmd/river`")
	}
	ctx := context.Background()
	cfg := NewConfig()
	cfg.PostgresDSN = postgresBase()
	cfg.N, cfg.RiverBin, cfg.Timeout = 2000, bin, time.Minute
	r := &runner{cfg: cfg}
	tg := openPostgres(t, cfg.PostgresDSN)
	run, err := r.river(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("river bench: %+v; %d transactions, %v PostgreSQL CPU", run.sum, run.cost.xacts, run.cost.cpu)
	if run.sum.worked != 2000 || run.sum.inserted != 2000 || run.sum.perSec <= 0 {
		t.Errorf("river bench: %+v", run.sum)
	}
	if !run.cost.xactOK || run.cost.xacts < 1 || !run.cost.cpuOK || run.cost.cpu <= 0 {
		t.Errorf("river cost: %+v", run.cost)
	}
}
