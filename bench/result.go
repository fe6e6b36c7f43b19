package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// Result is one row of the suite's output: one scenario on one dialect. It is
// printed as one JSON line when the scenario ends and as a row of the final table.
type Result struct {
	Dialect  string `json:"dialect"`
	Scenario string `json:"scenario"`
	// N is the number of tasks the scenario enqueued or had queued; Samples the
	// number of measurements behind a percentile; Runs the number of repeats
	// behind a median.
	N           int `json:"n,omitempty"`
	Concurrency int `json:"concurrency,omitempty"`
	Samples     int `json:"samples,omitempty"`
	Runs        int `json:"runs,omitempty"`

	// TasksPerSec is the throughput of throughput scenarios (the median of Runs).
	TasksPerSec float64 `json:"tasks_per_s,omitempty"`
	// P50Ms and P99Ms are latency percentiles in milliseconds.
	P50Ms float64 `json:"p50_ms,omitempty"`
	P99Ms float64 `json:"p99_ms,omitempty"`
	// Ratio is the scenario's own ratio (depth: p50 against the 10,000-task case).
	Ratio float64 `json:"ratio,omitempty"`
	// CeilingTasksPerSec and VsCeiling compare a PostgreSQL throughput with the
	// pgbench ceiling measured in the same run.
	CeilingTasksPerSec float64 `json:"ceiling_tasks_per_s,omitempty"`
	VsCeiling          float64 `json:"vs_ceiling,omitempty"`
	// RiverTasksPerSec and VsRiver compare a drain with River's burn-down of
	// the same number of jobs (the river row, median) in the same run.
	RiverTasksPerSec float64 `json:"river_tasks_per_s,omitempty"`
	VsRiver          float64 `json:"vs_river,omitempty"`
	// XactPerTask is the committed transactions of the scenario's database per
	// task (pg_stat_database); PGCPUPerTaskUs the CPU time of its PostgreSQL
	// backends per task in microseconds (/proc). Medians of Runs.
	XactPerTask    float64 `json:"xact_per_task,omitempty"`
	PGCPUPerTaskUs float64 `json:"pg_cpu_us_per_task,omitempty"`
	// WALPerTask is the bytes of WAL the server wrote per task while the
	// work ran (pg_current_wal_insert_lsn before and after); median of Runs. Unlike
	// CPU time, it depends little on how fast the machine is.
	WALPerTask float64 `json:"wal_bytes_per_task,omitempty"`

	// Summary is the table's result cell; Extra holds the scenario's other figures.
	Summary string         `json:"summary"`
	Extra   map[string]any `json:"extra,omitempty"`
	// TimedOut says the scenario hit its time bound; its figures come from what
	// finished by then.
	TimedOut bool   `json:"timed_out,omitempty"`
	Note     string `json:"note,omitempty"`
	Error    string `json:"error,omitempty"`
}

// set records an extra figure, creating the map on first use.
func (r *Result) set(key string, v any) {
	if r.Extra == nil {
		r.Extra = map[string]any{}
	}
	r.Extra[key] = v
}

// note appends a remark to the row's note.
func (r *Result) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if r.Note == "" {
		r.Note = s
	} else {
		r.Note += "; " + s
	}
}

// writeJSON prints the result as one line of JSON.
func (r Result) writeJSON(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode result %s/%s: %w", r.Dialect, r.Scenario, err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// writeTable prints the human table of all results.
func writeTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DIALECT\tSCENARIO\tN\tCONC\tRESULT\tVS CEILING\tVS RIVER\tXACT/TASK\tPG CPU/TASK\tWAL/TASK\tNOTE")
	for _, r := range results {
		n, conc, xact, cpu, wal := "-", "-", "-", "-", "-"
		if r.N > 0 {
			n = thousands(float64(r.N))
		}
		if r.Concurrency > 0 {
			conc = fmt.Sprint(r.Concurrency)
		}
		if r.XactPerTask > 0 {
			xact = fmt.Sprintf("%.3g", r.XactPerTask)
		}
		if r.PGCPUPerTaskUs > 0 {
			cpu = fmt.Sprintf("%.0f µs", r.PGCPUPerTaskUs)
		}
		if r.WALPerTask > 0 {
			wal = fmt.Sprintf("%.0f B", r.WALPerTask)
		}
		summary := r.Summary
		if r.Error != "" {
			summary = "ERROR: " + r.Error
		}
		note := r.Note
		if r.TimedOut {
			note = strings.TrimPrefix(note+"; TIMED OUT (figures from what finished)", "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			r.Dialect, r.Scenario, n, conc, summary, ratio(r.VsCeiling), ratio(r.VsRiver), xact, cpu, wal, note)
	}
	return tw.Flush()
}

// ratio formats a ratio as 0.42x, keeping two significant digits of a tiny
// one; "-" for none.
func ratio(x float64) string {
	switch {
	case x >= 0.01:
		return fmt.Sprintf("%.2fx", x)
	case x > 0:
		return fmt.Sprintf("%.2gx", x)
	}
	return "-"
}

// thousands formats a non-negative number rounded to an integer with commas.
func thousands(x float64) string {
	s := fmt.Sprintf("%.0f", math.Round(x))
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
