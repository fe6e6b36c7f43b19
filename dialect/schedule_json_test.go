package dialect_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// TestScheduleInfoJSONRoundTrip: a schedule's JSON (durations in seconds, the
// plan as an object) reads back into the same ScheduleInfo, and a plan
// written as a string of JSON, as releases before this one printed it, reads
// too.
func TestScheduleInfoJSONRoundTrip(t *testing.T) {
	last := time.Date(2026, 11, 29, 2, 0, 0, 0, time.UTC)
	in := dialect.ScheduleInfo{ID: 7, Name: "nightly", Interval: 90 * time.Second, Grace: time.Minute,
		Plan: `{"process":"nightly","stages":[{"order":1,"tasks":[{"body":"SELECT 1"}]}]}`, Missed: "skip",
		NextRun: last.Add(24 * time.Hour), LastRun: &last, LastOutcome: "enqueued"}
	b, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"plan": {`) || !strings.Contains(string(b), `"interval_seconds": 90`) {
		t.Fatalf("JSON: %s; want the plan as an object and the interval in seconds", b)
	}
	var out dialect.ScheduleInfo
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Plan != in.Plan || out.Interval != in.Interval || out.Grace != in.Grace || out.Name != in.Name ||
		!out.NextRun.Equal(in.NextRun) || out.LastRun == nil || !out.LastRun.Equal(last) {
		t.Errorf("read back %+v; want %+v", out, in)
	}
	var old dialect.ScheduleInfo
	if err := json.Unmarshal([]byte(`{"name":"x","plan":"{\"process\":\"x\"}"}`), &old); err != nil || old.Plan != `{"process":"x"}` {
		t.Errorf("a plan written as a string: %+v, %v", old, err)
	}
}
