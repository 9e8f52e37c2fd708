package admin

import (
	"context"
	"math"
	"slices"
)

// countDone fills in each consumer's Done: counted row by row when exact
// is set or the planner knows nothing of the inbox yet, estimated
// otherwise. Counting done messages reads every one of them; on an inbox
// that keeps 50 million for the dedupe window that is the one count in
// Stats that cannot come from a small index.
func (a *Admin) countDone(ctx context.Context, exact bool, consumers []ConsumerStats) error {
	if len(consumers) == 0 {
		return nil
	}
	if !exact {
		est, err := a.plannerEstimate(ctx)
		if err != nil {
			return err
		}
		if est != nil {
			for i := range consumers {
				c := &consumers[i]
				notDone := c.Pending + c.Running + c.Dead + c.Discarded
				c.Done = max(0, int64(math.Round(est.rows*est.share(c.Consumer)))-notDone)
				c.DoneEstimated = true
			}
			return nil
		}
	}
	rows, err := a.pool.Query(ctx, a.q["doneExact"])
	if err != nil {
		return a.dbError(ctx, "count done messages", err)
	}
	defer rows.Close()
	done := map[string]int64{}
	for rows.Next() {
		var (
			consumer string
			n        int64
		)
		if err := rows.Scan(&consumer, &n); err != nil {
			return a.dbError(ctx, "count done messages", err)
		}
		done[consumer] = n
	}
	if err := rows.Err(); err != nil {
		return a.dbError(ctx, "count done messages", err)
	}
	for i := range consumers {
		consumers[i].Done = done[consumers[i].Consumer]
	}
	return nil
}

// tableEstimate is what the planner knows of the inbox: its rows now, and
// how they spread over consumers.
type tableEstimate struct {
	// rows estimates the inbox's rows now, as the planner does: the rows
	// per page at the last VACUUM or ANALYZE times the pages now.
	rows float64
	// mcv and freqs are the consumer column's most common values and the
	// fraction of rows each holds; others is the fraction the remaining
	// values share, evenly, among otherCount of them.
	mcv        []string
	freqs      []float64
	others     float64
	otherCount float64
}

// share estimates the fraction of the inbox's rows that consumer holds.
func (e *tableEstimate) share(consumer string) float64 {
	if i := slices.Index(e.mcv, consumer); i >= 0 {
		return e.freqs[i]
	}
	return e.others / max(e.otherCount, 1)
}

// plannerEstimate reads the planner's statistics of the inbox, in constant
// time, or returns nil when it has none (never analyzed: a new inbox, and
// small, since autovacuum analyzes any table that grows).
func (a *Admin) plannerEstimate(ctx context.Context) (*tableEstimate, error) {
	var (
		reltuples          float64
		relpages, pagesNow int64
		mcv                []string
		freqs              []float64
		nDistinct          *float64
		nullFrac           *float64
	)
	err := a.pool.QueryRow(ctx, a.q["doneEstimate"], a.cfg.Schema).Scan(&reltuples, &relpages, &pagesNow, &mcv, &freqs, &nDistinct, &nullFrac)
	if err != nil {
		return nil, a.dbError(ctx, "estimate done messages", err)
	}
	if reltuples < 0 || nDistinct == nil || len(mcv) != len(freqs) {
		return nil, nil
	}
	e := &tableEstimate{rows: reltuples, mcv: mcv, freqs: freqs}
	if relpages > 0 {
		e.rows = reltuples / float64(relpages) * float64(pagesNow)
	}
	e.others = 1 - *nullFrac
	for _, f := range freqs {
		e.others -= f
	}
	distinct := *nDistinct
	if distinct < 0 { // a fraction of the rows
		distinct = -distinct * e.rows
	}
	e.otherCount = distinct - float64(len(mcv))
	return e, nil
}
