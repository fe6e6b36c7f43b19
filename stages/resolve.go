package stages

import (
	"time"

	"github.com/stageq/stageq/dialect"
)

// Resolve flattens a validated plan into the rows a dialect inserts, applying the
// plan's defaults and stageq's.
func (p Plan) Resolve() dialect.SubmitParams {
	out := dialect.SubmitParams{Process: p.ProcessName()}
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

func (p Plan) resolveTask(order int, t Task) dialect.NewTask {
	nt := dialect.NewTask{
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
