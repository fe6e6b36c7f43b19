package bench

import (
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := percentile(s, c.p); got != c.want {
			t.Errorf("percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile of nothing = %v, want 0", got)
	}
	if got := median([]float64{3, 1, 2, 10}); got != 2.5 {
		t.Errorf("median = %v, want 2.5", got)
	}
}

func TestParseStatements(t *testing.T) {
	log := strings.Join([]string{
		"2026-11-22 03:27:26.460 UTC [2883] postgres@bench LOG:  execute stmtcache_ab12: SELECT stageq.finish($1, $2)",
		"2026-11-22 03:27:26.460 UTC [2883] postgres@bench DETAIL:  parameters: $1 = '1', $2 = '2'",
		"2026-11-22 03:27:26.461 UTC [2884] postgres@other LOG:  statement: SELECT 2",
		"2026-11-22 03:27:26.462 UTC [2885] postgres@bench LOG:  execute <unnamed>: WITH c AS (",
		"\t  SELECT 1",
		"\t) SELECT * FROM c",
		"2026-11-22 03:27:26.463 UTC [2885] postgres@bench LOG:  statement: begin",
		"2026-11-22 03:27:26.464 UTC [2200] LOG:  checkpoint starting: time",
		"2026-11-22 03:27:26.465 UTC [2886] postgres@bench ERROR:  relation does not exist",
		"2026-11-22 03:27:26.466 UTC [2887] postgres@bench LOG:  statement: /* stageq task 12 lease -34 */",
		"\tSELECT 1",
		"2026-11-22 03:27:26.467 UTC [2888] postgres@bench LOG:  statement: /* stageq task 13 lease 56 */",
		"\tSELECT 1",
	}, "\n")
	got, err := parseStatements(strings.NewReader(log), "bench")
	if err != nil {
		t.Fatal(err)
	}
	body := "/* stageq task <id> lease <token> */ SELECT 1" // one statement, whatever the attempt
	want := []string{"SELECT stageq.finish($1, $2)", "WITH c AS ( SELECT 1 ) SELECT * FROM c", "begin", body, body}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("statements = %q, want %q", got, want)
	}
}

func TestThousands(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.6: "1,234,568"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%v) = %q, want %q", in, got, want)
		}
	}
}
