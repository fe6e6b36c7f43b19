package stages

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Defaults for a task's fields left out of a plan or a command line.
const (
	DefaultKind        = "sql"
	DefaultMaxAttempts = 3
	MaxNameLength      = 200
)

// Plan is one submission: tasks of one process in one or more stages, inserted in
// one transaction so no worker ever sees half of it.
//
// In a plan file (YAML or JSON):
//
//	process: nightly-etl        # optional; "default" when left out
//	defaults:                   # optional; apply to every task below
//	  max_attempts: 5
//	stages:
//	  - order: 100
//	    tasks:
//	      - body: CALL etl.extract_customers()
//	      - body: CALL etl.extract_orders()
//	        atomic: true
//	  - order: 200
//	    limit: erp-api           # optional; every task of the stage counts against it
//	    tasks:
//	      - body: CALL etl.load()
//	        max_attempts: 1
//	        delay: 30s
//
// A plan may also set its process's scheduling (kept until changed):
//
//	priority: 10       # served before runnable processes of a lower priority
//	weight: 3          # three claims to a weight-1 process's one (1..1000)
//	max_parallel: 4    # at most 4 of its tasks run at once (0: no cap)
type Plan struct {
	Process  string       `json:"process,omitempty" yaml:"process,omitempty"`
	Defaults TaskDefaults `json:"defaults,omitempty" yaml:"defaults,omitempty"`
	Stages   []Stage      `json:"stages" yaml:"stages"`

	// Priority, Weight and MaxParallel change the process's scheduling when set.
	Priority    *int `json:"priority,omitempty" yaml:"priority,omitempty"`
	Weight      *int `json:"weight,omitempty" yaml:"weight,omitempty"`
	MaxParallel *int `json:"max_parallel,omitempty" yaml:"max_parallel,omitempty"`
}

// Stage is the tasks of one ExecutionOrder.
type Stage struct {
	Order *int   `json:"order" yaml:"order"`
	Limit string `json:"limit,omitempty" yaml:"limit,omitempty"`
	Tasks []Task `json:"tasks" yaml:"tasks"`
}

// TaskDefaults are fields every task of a plan inherits unless it sets its own.
type TaskDefaults struct {
	Kind        string `json:"kind,omitempty" yaml:"kind,omitempty"`
	MaxAttempts int    `json:"max_attempts,omitempty" yaml:"max_attempts,omitempty"`
	Priority    int    `json:"priority,omitempty" yaml:"priority,omitempty"`
	// Atomic: see Task.Atomic.
	Atomic bool   `json:"atomic,omitempty" yaml:"atomic,omitempty"`
	Limit  string `json:"limit,omitempty" yaml:"limit,omitempty"`
}

// Task is one unit of work. Body is SQL text when Kind is "sql" (the default), or
// the payload handed to the Go handler registered for Kind.
type Task struct {
	Kind        string `json:"kind,omitempty" yaml:"kind,omitempty"`
	Body        string `json:"body" yaml:"body"`
	MaxAttempts int    `json:"max_attempts,omitempty" yaml:"max_attempts,omitempty"`
	Priority    int    `json:"priority,omitempty" yaml:"priority,omitempty"`
	// Atomic runs a SQL body (kind sql) and the record of its end in one
	// transaction. Other kinds (Go handlers, exec) ignore it.
	Atomic *bool     `json:"atomic,omitempty" yaml:"atomic,omitempty"`
	Delay  Duration  `json:"delay,omitempty" yaml:"delay,omitempty"`
	RunAt  time.Time `json:"run_at,omitzero" yaml:"run_at,omitempty"`
	// Limit names the cluster-wide concurrency limit the task counts against.
	Limit string `json:"limit,omitempty" yaml:"limit,omitempty"`
}

// Duration is a time.Duration written as "30s", "5m" or "1h30m" in plan files.
type Duration time.Duration

// UnmarshalText implements encoding.TextUnmarshaler for JSON and YAML.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %q: use a number with a unit, like 30s or 5m", string(b))
	}
	*d = Duration(v)
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// ErrInvalidPlan is wrapped by every validation and parse error of a plan.
var ErrInvalidPlan = errors.New("invalid plan")

// ParseFile reads a plan file; its extension (.yaml, .yml or .json) picks the format.
func ParseFile(name string, r io.Reader) (Plan, error) {
	format, err := FileFormat(name)
	if err != nil {
		return Plan{}, fmt.Errorf("%w: %v", ErrInvalidPlan, err)
	}
	return Parse(r, format)
}

// Parse reads a plan in format "yaml" or "json" as Decode reads a file
// (unknown fields, a second plan and the rest refused), and validates it.
func Parse(r io.Reader, format string) (Plan, error) {
	src, err := io.ReadAll(r)
	if err != nil {
		return Plan{}, fmt.Errorf("%w: read: %v", ErrInvalidPlan, err)
	}
	var p Plan
	if err := Decode(src, format, "plan", &p); err != nil {
		return Plan{}, fmt.Errorf("%w: %v", ErrInvalidPlan, err)
	}
	if err := p.Validate(); err != nil {
		return Plan{}, err
	}
	return p, nil
}

// Validate checks a plan and names the first problem by stage and task. It is
// the one place every submission passes (CLI, plan files, the Go API) before any
// SQL runs, so each dialect refuses the same input with the same message.
func (p Plan) Validate() error {
	if err := ValidateName(p.ProcessName()); err != nil {
		return fmt.Errorf("%w: process: %v", ErrInvalidPlan, err)
	}
	for _, f := range []struct {
		name string
		v    *int
	}{{"priority", p.Priority}, {"defaults.priority", &p.Defaults.Priority}} {
		if f.v != nil {
			if err := CheckInt32(f.name, *f.v); err != nil {
				return fmt.Errorf("%w: %v", ErrInvalidPlan, err)
			}
		}
	}
	for _, f := range []struct {
		name   string
		v      *int
		lo, hi int
	}{{"weight", p.Weight, 1, MaxWeight}, {"max_parallel", p.MaxParallel, 0, math.MaxInt32}} {
		if f.v != nil {
			if err := CheckRange(f.name, *f.v, f.lo, f.hi); err != nil {
				return fmt.Errorf("%w: %v", ErrInvalidPlan, err)
			}
		}
	}
	for _, f := range [][2]string{{"defaults.kind", p.Defaults.Kind}, {"defaults.limit", p.Defaults.Limit}} {
		if err := CheckText(f[0], f[1]); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidPlan, err)
		}
	}
	if p.Defaults.MaxAttempts < 0 {
		return fmt.Errorf("%w: defaults.max_attempts must be >= 1, got %d", ErrInvalidPlan, p.Defaults.MaxAttempts)
	}
	if m := p.Defaults.MaxAttempts; m != 0 { // 0: not set, the default
		if err := CheckRange("defaults.max_attempts", m, 1, math.MaxInt32); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidPlan, err)
		}
	}
	if err := p.Settings().Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidPlan, err)
	}
	if p.Defaults.Limit != "" {
		if err := ValidateLimitKey(p.Defaults.Limit); err != nil {
			return fmt.Errorf("%w: defaults.limit: %v", ErrInvalidPlan, err)
		}
	}
	if len(p.Stages) == 0 {
		return fmt.Errorf("%w: a plan needs at least one stage", ErrInvalidPlan)
	}
	seen := map[int]bool{}
	for i, s := range p.Stages {
		where := fmt.Sprintf("stages[%d]", i)
		if s.Order == nil {
			return fmt.Errorf("%w: %s: order is required", ErrInvalidPlan, where)
		}
		if *s.Order < 0 {
			return fmt.Errorf("%w: %s: order must be >= 0, got %d", ErrInvalidPlan, where, *s.Order)
		}
		if err := CheckRange("order", *s.Order, 0, math.MaxInt32); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrInvalidPlan, where, err)
		}
		if err := CheckText("limit", s.Limit); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrInvalidPlan, where, err)
		}
		if seen[*s.Order] {
			return fmt.Errorf("%w: %s: order %d appears twice; put its tasks in one stage", ErrInvalidPlan, where, *s.Order)
		}
		seen[*s.Order] = true
		if s.Limit != "" {
			if err := ValidateLimitKey(s.Limit); err != nil {
				return fmt.Errorf("%w: %s.limit: %v", ErrInvalidPlan, where, err)
			}
		}
		if len(s.Tasks) == 0 {
			return fmt.Errorf("%w: %s (order %d) has no tasks", ErrInvalidPlan, where, *s.Order)
		}
		for j, t := range s.Tasks {
			if err := t.validate(); err != nil {
				return fmt.Errorf("%w: %s.tasks[%d]: %v", ErrInvalidPlan, where, j, err)
			}
		}
	}
	return nil
}

func (t Task) validate() error {
	for _, f := range [][2]string{{"body", t.Body}, {"kind", t.Kind}, {"limit", t.Limit}} {
		if err := CheckText(f[0], f[1]); err != nil {
			return err
		}
	}
	if strings.TrimSpace(t.Body) == "" {
		return errors.New("body must not be empty")
	}
	if err := CheckInt32("priority", t.Priority); err != nil {
		return err
	}
	if t.MaxAttempts < 0 {
		return fmt.Errorf("max_attempts must be >= 1, got %d", t.MaxAttempts)
	}
	if t.MaxAttempts != 0 { // 0: not set, the default
		if err := CheckRange("max_attempts", t.MaxAttempts, 1, math.MaxInt32); err != nil {
			return err
		}
	}
	if t.Delay < 0 {
		return fmt.Errorf("delay must not be negative, got %s", time.Duration(t.Delay))
	}
	if t.Delay != 0 && !t.RunAt.IsZero() {
		// Either would be the start; the other would be ignored without a word.
		return errors.New("give delay or run_at, not both")
	}
	if err := ValidateKind(t.Kind); err != nil {
		return err
	}
	if t.Limit != "" {
		if err := ValidateLimitKey(t.Limit); err != nil {
			return fmt.Errorf("limit: %v", err)
		}
	}
	return nil
}

// Settings is the process scheduling the plan sets (nil fields: unchanged).
func (p Plan) Settings() Settings {
	return Settings{Priority: p.Priority, Weight: p.Weight, MaxParallel: p.MaxParallel}
}

// ValidateKind checks a task kind as the kind columns store it: text every
// dialect keeps faithfully, at most MaxNameLength long. (Empty is "sql" in a
// plan; Worker.Handle refuses it.)
func ValidateKind(kind string) error {
	if err := CheckText("kind", kind); err != nil {
		return err
	}
	if len(kind) > MaxNameLength {
		return fmt.Errorf("kind is longer than %d characters", MaxNameLength)
	}
	return nil
}

// ValidateName checks a process name.
func ValidateName(name string) error {
	if err := CheckText("name", name); err != nil {
		return err
	}
	if strings.TrimSpace(name) == "" {
		return errors.New("name must not be empty")
	}
	if len(name) > MaxNameLength {
		return fmt.Errorf("name is longer than %d characters", MaxNameLength)
	}
	return nil
}

// ProcessName is the plan's process, "default" when it names none.
func (p Plan) ProcessName() string {
	if p.Process == "" {
		return "default"
	}
	return p.Process
}

// TaskCount is the number of tasks in the plan.
func (p Plan) TaskCount() int {
	n := 0
	for _, s := range p.Stages {
		n += len(s.Tasks)
	}
	return n
}
