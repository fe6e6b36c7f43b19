package stages

import (
	"time"
)

// Submission is a validated plan flattened into the rows a dialect inserts for
// one process: the plan's defaults and stageq's applied to every task.
type Submission struct {
	Process string
	Tasks   []Resolved
	// Settings, when set, changes the process's scheduling.
	Settings *Settings
}

// Resolved is one task of a submission.
type Resolved struct {
	Order       int
	Kind        string // "sql" for SQL bodies, otherwise a registered handler
	Body        string
	MaxAttempts int
	Priority    int
	Atomic      bool
	// RunAt, when set, is the earliest start; otherwise Delay after the database's now.
	RunAt *time.Time
	Delay time.Duration
	// LimitKey names the cluster-wide concurrency limit the task counts against
	// ("" for none).
	LimitKey string
}

// Resolve flattens a validated plan into its submission: its tasks stage by
// stage, in the order of the plan (callers match them back by position).
func (p Plan) Resolve() Submission {
	out := Submission{Process: p.ProcessName()}
	if p.Priority != nil || p.Weight != nil || p.MaxParallel != nil {
		st := p.Settings()
		out.Settings = &st
	}
	for _, s := range p.Stages {
		for _, t := range s.Tasks {
			nt := p.resolveTask(*s.Order, t)
			nt.LimitKey = firstNonEmpty(t.Limit, s.Limit, p.Defaults.Limit)
			out.Tasks = append(out.Tasks, nt)
		}
	}
	return out
}

func (p Plan) resolveTask(order int, t Task) Resolved {
	nt := Resolved{
		Order:       order,
		Kind:        firstNonEmpty(t.Kind, p.Defaults.Kind, DefaultKind),
		Body:        t.Body,
		MaxAttempts: firstPositive(t.MaxAttempts, p.Defaults.MaxAttempts, DefaultMaxAttempts),
		Priority:    t.Priority,
		Atomic:      p.Defaults.Atomic,
		Delay:       time.Duration(t.Delay),
	}
	if t.Priority == 0 {
		nt.Priority = p.Defaults.Priority
	}
	if t.Atomic != nil {
		nt.Atomic = *t.Atomic
	}
	if !t.RunAt.IsZero() {
		at := t.RunAt
		nt.RunAt = &at
	}
	return nt
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func firstPositive(vs ...int) int {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}
