package admin

import (
	"context"
	"math"
	"time"
)

// OutboxStats counts the outbox alone: Stats' Outbox, without the inbox's
// counts, for a page about the outbox. Every count but the published rows'
// is exact, read from the small partial indexes of its status; see
// StatsOptions for the published rows.
func (a *Admin) OutboxStats(ctx context.Context, opts StatsOptions) (*OutboxStats, error) {
	st, _, err := a.outboxStats(ctx, opts.Exact)
	if err != nil {
		return nil, err
	}
	return &st, nil
}

// outboxStats counts the outbox, and returns the database's time of the
// count.
func (a *Admin) outboxStats(ctx context.Context, exact bool) (OutboxStats, time.Time, error) {
	var (
		st     OutboxStats
		oldest *float64
		at     time.Time
	)
	err := a.pool.QueryRow(ctx, a.q["outboxStats"]).Scan(&st.Pending, &st.Running, &st.Dead, &oldest, &st.Blocked, &at)
	if err != nil {
		return st, at, a.dbError(ctx, "outbox stats", err)
	}
	st.OldestUnpublished = seconds(oldest)
	if !exact {
		est, err := a.plannerEstimate(ctx, "outbox")
		if err != nil {
			return st, at, err
		}
		if est != nil {
			st.Published = max(0, int64(math.Round(est.rows("")))-st.Pending-st.Running-st.Dead)
			st.PublishedEstimated = true
			return st, at.UTC(), nil
		}
	}
	if err := a.pool.QueryRow(ctx, a.q["publishedExact"]).Scan(&st.Published); err != nil {
		return st, at, a.dbError(ctx, "count published outbox rows", err)
	}
	return st, at.UTC(), nil
}
