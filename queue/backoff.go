package queue

import (
	"math/rand/v2"
	"time"
)

// retryDelay is exponential backoff with jitter: base·2^(attempt-1), capped at
// limit, then spread by ±20% so that tasks failing together do not retry together.
func retryDelay(attempt int, base, limit time.Duration) time.Duration {
	d := base
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	jitter := 0.8 + 0.4*rand.Float64()
	return max(time.Duration(float64(d)*jitter), time.Millisecond)
}
