package dialect

import (
	"encoding/json"
	"fmt"
	"time"
)

// taskJSON is the wire form of a NewTask for dialects whose submit routine takes
// a JSON array (PostgreSQL's stageq.submit, SQL Server's stageq.Submit). One
// parameter carries the whole batch, so the statement text never varies with it.
type taskJSON struct {
	Order       int        `json:"execution_order"`
	Kind        string     `json:"kind"`
	Body        string     `json:"body"`
	MaxAttempts int        `json:"max_attempts"`
	Priority    int        `json:"priority"`
	Atomic      bool       `json:"atomic"`
	RunAt       *time.Time `json:"run_at,omitempty"`
	DelayMS     int64      `json:"delay_ms"`
	LimitKey    string     `json:"limit_key,omitempty"`
}

// TasksJSON encodes tasks for a submit routine.
func TasksJSON(tasks []NewTask) ([]byte, error) {
	out := make([]taskJSON, len(tasks))
	for i, t := range tasks {
		var at *time.Time
		if t.RunAt != nil {
			u := t.RunAt.UTC()
			at = &u
		}
		out[i] = taskJSON{
			Order: t.Order, Kind: t.Kind, Body: t.Body, MaxAttempts: t.MaxAttempts,
			Priority: t.Priority, Atomic: t.Atomic, RunAt: at, DelayMS: t.Delay.Milliseconds(), LimitKey: t.LimitKey,
		}
	}
	return json.Marshal(out)
}

// LeasesJSON encodes the leases a worker extends for a dialect whose extend
// statement reads them as one JSON array of {id, token} objects (SQL Server's
// OPENJSON … WITH; SQLite passes flat arrays instead, dialect/sqlite/pairs.go):
// nil encodes as [], not null, so the statement always sees an array.
func LeasesJSON(tasks []TaskLease) (string, error) {
	if tasks == nil {
		tasks = []TaskLease{}
	}
	b, err := json.Marshal(tasks)
	if err != nil {
		return "", fmt.Errorf("extend leases: %w", err)
	}
	return string(b), nil
}
