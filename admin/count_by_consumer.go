package admin

import (
	"context"

	"github.com/pgbox/pgbox/internal/ident"
)

// countByConsumerSQL counts the messages matching the filter per
// consumer: countSQL, grouped.
const countByConsumerSQL = `
SELECT i.consumer, count(*) FROM /* schema */inbox AS i WHERE ` + filterSQL + `
GROUP BY i.consumer`

// CountByConsumer counts the messages matching f, per consumer: which
// consumers a replay of f would touch, and how many of each, when f does
// not name one (a failure group, a status). Consumers without a match are
// left out. It reads what Count reads.
func (a *Admin) CountByConsumer(ctx context.Context, f Filter) (map[string]int64, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	rows, err := a.pool.Query(ctx, ident.Render(countByConsumerSQL, a.cfg.Schema), f.args()...)
	if err != nil {
		return nil, a.dbError(ctx, "count messages", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var (
			consumer string
			n        int64
		)
		if err := rows.Scan(&consumer, &n); err != nil {
			return nil, a.dbError(ctx, "count messages", err)
		}
		out[consumer] = n
	}
	if err := rows.Err(); err != nil {
		return nil, a.dbError(ctx, "count messages", err)
	}
	return out, nil
}
