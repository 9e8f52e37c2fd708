package idempotency

import (
	"context"
	"fmt"
)

// DeleteExpired deletes the keys whose Config.Expiry has passed, with their
// stored responses, and returns how many it deleted. It works in batches of
// 1000 keys, one short statement each, so it never holds many locks or runs
// long, and it loops until a batch comes back short. A key whose request
// still holds its lease is kept.
//
// Expired keys are already treated as new, so deleting them only reclaims
// space. Package maintenance calls it once per interval for the whole
// deployment (its retention job); call it yourself only without that, from
// any one process or several (they skip each other's rows). If ctx ends,
// it returns what it deleted so far with ctx's error.
func (m *Middleware) DeleteExpired(ctx context.Context) (int, error) {
	total := 0
	for {
		tag, err := m.pool.Exec(ctx, m.q.cleanup, m.cleanupBatch)
		if err != nil {
			return total, fmt.Errorf("idempotency: delete expired keys: %w", m.explain(ctx, err))
		}
		total += int(tag.RowsAffected())
		if m.cleanupHook != nil {
			m.cleanupHook(tag.RowsAffected())
		}
		if tag.RowsAffected() < int64(m.cleanupBatch) {
			return total, nil
		}
	}
}
