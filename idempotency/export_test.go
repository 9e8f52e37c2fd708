package idempotency

// SetCleanupBatch makes m's DeleteExpired delete at most n keys per
// statement, and call counted after each statement, so that a test can see
// the batches.
func SetCleanupBatch(m *Middleware, n int, counted func(deleted int64)) {
	m.cleanupBatch = n
	m.cleanupHook = counted
}
