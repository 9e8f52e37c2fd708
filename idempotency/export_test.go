package idempotency

import "time"

// SetCleanupBatch makes m's DeleteExpired delete at most n keys per
// statement, and call counted after each statement, so that a test can see
// the batches.
func SetCleanupBatch(m *Middleware, n int, counted func(deleted int64)) {
	m.cleanupBatch = n
	m.cleanupHook = counted
}

// SetBookkeepingTimeout bounds each of m's own statements by d instead of
// bookkeepingTimeout, so that a test can run a handler longer than it.
func SetBookkeepingTimeout(m *Middleware, d time.Duration) { m.bookkeeping = d }
