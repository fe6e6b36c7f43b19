//go:build !linux

package queue

import "time"

// bootClock: no clock known to count suspension here, so a body always reads
// its lease before it starts (attempt.leaseHeld).
func bootClock() (time.Duration, bool) { return 0, false }
