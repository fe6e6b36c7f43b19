package stages

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Settings are a process's scheduling knobs (nil fields: unchanged).
type Settings struct {
	// Priority puts a process ahead: runnable processes of a higher priority are
	// served before any of a lower one.
	Priority *int `json:"priority,omitempty"`
	// Weight is a process's share among runnable processes of its priority:
	// weight 3 gets three claims to weight 1's one (1..1000, default 1).
	Weight *int `json:"weight,omitempty"`
	// MaxParallel caps how many of the process's tasks run at once; 0 removes
	// the cap (nil leaves it as it is).
	MaxParallel *int `json:"max_parallel,omitempty"`
}

// Bounds of the settings and of limit keys.
const (
	MaxWeight   = 1000
	MaxLimitKey = 200
)

// Validate names the first bad setting.
func (s Settings) Validate() error {
	if s.Weight != nil && (*s.Weight < 1 || *s.Weight > MaxWeight) {
		return fmt.Errorf("weight must be between 1 and %d, got %d", MaxWeight, *s.Weight)
	}
	if s.Priority != nil && (*s.Priority < math.MinInt32 || *s.Priority > math.MaxInt32) {
		return fmt.Errorf("priority %d is out of range: it must fit in 32 bits", *s.Priority)
	}
	if s.MaxParallel != nil && (*s.MaxParallel < 0 || *s.MaxParallel > math.MaxInt32) {
		return fmt.Errorf("max_parallel must be >= 1 (or 0 for no cap), got %d", *s.MaxParallel)
	}
	return nil
}

// Limit key prefixes: a limit on every task of a kind, or on a process.
const (
	LimitKindPrefix    = "kind:"
	LimitProcessPrefix = "process:"
)

// ValidateLimitKey checks a limit key as a task carries it (not a kind: or
// process: key, which apply by themselves).
func ValidateLimitKey(key string) error {
	switch {
	case strings.TrimSpace(key) == "":
		return errors.New("limit key must not be empty")
	case len(key) > MaxLimitKey:
		return fmt.Errorf("limit key is longer than %d characters", MaxLimitKey)
	case strings.HasPrefix(key, LimitKindPrefix), strings.HasPrefix(key, LimitProcessPrefix):
		return fmt.Errorf("limit key %q: the prefixes %q and %q are reserved for kind and process limits",
			key, LimitKindPrefix, LimitProcessPrefix)
	}
	return nil
}
