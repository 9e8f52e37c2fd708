// Package backoff computes retry delays: exponential, capped, with jitter.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Exponential returns the wait before retry number attempt (1 for the
// first retry): first, doubled each time, capped at ceiling, and drawn at
// random from the upper half of that (50% to 100%), so that work that failed
// together does not all come back at the same instant.
func Exponential(attempt int, first, ceiling time.Duration) time.Duration {
	wait := ceiling
	attempt = max(attempt, 1)
	if attempt < 63 {
		if w := first << (attempt - 1); w > 0 && w < ceiling && w>>(attempt-1) == first {
			wait = w
		}
	}
	return wait/2 + rand.N(wait/2+1)
}
