package admin

import "context"

// OutboxStats counts the outbox alone: Stats' Outbox, without the inbox's
// counts, for a page about the outbox. Like Stats, it reads the whole
// outbox table.
func (a *Admin) OutboxStats(ctx context.Context) (*OutboxStats, error) {
	var (
		st     OutboxStats
		oldest *float64
		at     any
	)
	err := a.pool.QueryRow(ctx, a.q["outboxStats"]).Scan(&st.Pending, &st.Running, &st.Published, &st.Dead, &oldest, &at)
	if err != nil {
		return nil, a.dbError(ctx, "outbox stats", err)
	}
	st.OldestUnpublished = seconds(oldest)
	return &st, nil
}
