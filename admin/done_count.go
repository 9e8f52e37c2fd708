package admin

import (
	"context"
	"math"
	"slices"

	"github.com/pgbox/pgbox/internal/ident"
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
		est, err := a.plannerEstimate(ctx, "inbox")
		if err != nil {
			return err
		}
		if est != nil {
			for i := range consumers {
				c := &consumers[i]
				notDone := c.Pending + c.Running + c.Dead + c.Discarded
				c.Done = max(0, int64(math.Round(est.rows(c.Consumer)))-notDone)
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

// tableEstimate is what the planner knows of the inbox or the outbox:
// each analyzed partition, and the pages of those never analyzed.
type tableEstimate struct {
	parts []partitionEstimate
	// unanalyzedPages are the pages of the partitions never analyzed (a
	// day's partition in its first minutes, before autovacuum gets to it),
	// estimated as the analyzed ones are.
	unanalyzedPages int64
}

// partitionEstimate is what the planner knows of one partition.
type partitionEstimate struct {
	// rows estimates the partition's rows now, as the planner does: the
	// rows per page at the last VACUUM or ANALYZE times the pages now.
	rows float64
	// pages are its pages now.
	pages int64
	// mcv and freqs are the consumer column's most common values and the
	// fraction of rows each holds; others is the fraction the remaining
	// values share, evenly, among otherCount of them. All zero without
	// statistics of the column (the outbox, an empty partition).
	mcv        []string
	freqs      []float64
	others     float64
	otherCount float64
}

// share estimates the fraction of the partition's rows that consumer holds.
func (e *partitionEstimate) share(consumer string) float64 {
	if i := slices.Index(e.mcv, consumer); i >= 0 {
		return e.freqs[i]
	}
	return e.others / max(e.otherCount, 1)
}

// rows estimates the rows of the table, or of one consumer's when
// consumer is not empty: from each analyzed partition, and from the
// unanalyzed pages as many as an analyzed page holds on average.
func (e *tableEstimate) rows(consumer string) float64 {
	var n, pages float64
	for i := range e.parts {
		p := &e.parts[i]
		pages += float64(p.pages)
		if consumer == "" {
			n += p.rows
		} else {
			n += p.rows * p.share(consumer)
		}
	}
	if pages > 0 {
		n += n / pages * float64(e.unanalyzedPages)
	}
	return n
}

// plannerEstimate reads the planner's statistics of the partitions of
// table (inbox or outbox), in time that grows with their number, not their
// rows, or returns nil when no partition of it was ever analyzed (a new
// table, and small, since autovacuum analyzes any table that grows).
func (a *Admin) plannerEstimate(ctx context.Context, table string) (*tableEstimate, error) {
	rows, err := a.pool.Query(ctx, a.q["estimate"], ident.Quote(a.cfg.Schema), table)
	if err != nil {
		return nil, a.dbError(ctx, "estimate "+table+" rows", err)
	}
	defer rows.Close()
	est := &tableEstimate{}
	for rows.Next() {
		var (
			reltuples          float64
			relpages, pagesNow int64
			mcv                []string
			freqs              []float64
			nDistinct          *float64
			nullFrac           *float64
		)
		if err := rows.Scan(&reltuples, &relpages, &pagesNow, &mcv, &freqs, &nDistinct, &nullFrac); err != nil {
			return nil, a.dbError(ctx, "estimate "+table+" rows", err)
		}
		if reltuples < 0 || (relpages == 0 && pagesNow > 0) { // never analyzed, or empty then
			est.unanalyzedPages += pagesNow
			continue
		}
		p := partitionEstimate{rows: reltuples, pages: pagesNow}
		if relpages > 0 {
			p.rows = reltuples / float64(relpages) * float64(pagesNow)
		}
		if nDistinct != nil && nullFrac != nil && len(mcv) == len(freqs) {
			p.mcv, p.freqs = mcv, freqs
			p.others = 1 - *nullFrac
			for _, f := range freqs {
				p.others -= f
			}
			distinct := *nDistinct
			if distinct < 0 { // a fraction of the rows
				distinct = -distinct * p.rows
			}
			p.otherCount = distinct - float64(len(mcv))
		}
		est.parts = append(est.parts, p)
	}
	if err := rows.Err(); err != nil {
		return nil, a.dbError(ctx, "estimate "+table+" rows", err)
	}
	var analyzedPages int64
	for _, p := range est.parts {
		analyzedPages += p.pages
	}
	if analyzedPages == 0 && est.unanalyzedPages > 0 || len(est.parts) == 0 {
		return nil, nil // nothing to extrapolate from: count
	}
	return est, nil
}
