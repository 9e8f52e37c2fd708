package admin

import (
	"context"
	"time"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/tables"
)

// Overdue is how long due work has waited for a worker: for each consumer,
// its earliest pending message that is due (available_at passed, by the
// database clock), the outbox's earliest due pending row, and the
// unfinished scheduled replays that are due, with whether a maintainer
// leads to run them. Work that waits long past its due time means nothing
// claims it: no dispatcher or relay running, or all stuck (or, for a keyed
// message, its key held up behind a failing one). A scheduled replay may
// rightly take long (a throttled one spreads its batches out), so what
// tells it stalled is that no maintainer leads.
type Overdue struct {
	// At is when it was read (database time).
	At time.Time `json:"at"`
	// Consumers maps each consumer with a pending message due now to how
	// long its earliest has been due.
	Consumers map[string]Duration `json:"consumers"`
	// MaintainerLeads says a maintenance.Maintainer leads the maintenance
	// jobs (River's leadership has not expired): scheduled replays run.
	MaintainerLeads bool `json:"maintainer_leads"`
	// Outbox is how long the outbox's earliest due pending row has been
	// due; nil when none is due.
	Outbox *Duration `json:"outbox"`
	// Replays counts the scheduled replays that are due (RunAt passed)
	// and unfinished: waiting for their first batch, or under way.
	Replays int64 `json:"replays"`
	// Replay is how long the earliest of those has been due; nil when
	// none is.
	Replay *Duration `json:"replay"`
}

// overdueSQL reads, for each consumer (found by skipping through the
// primary key: distinctConsumersSQL), how long ago its earliest pending
// message fell due, from the front of inbox_pending_idx (consumer,
// available_at): one index probe per consumer, whatever the backlog. The
// outbox's earliest due row is the front of outbox_pending_idx
// (available_at), and the unfinished scheduled replays due are the front
// of scheduled_replays_due_idx (run_at); the maintenance leader is River's
// row in river_leader, if unexpired (see leaderSQL). Rows not due yet are
// left out.
const overdueSQL = `
WITH RECURSIVE ` + distinctConsumersSQL + `
SELECT now(), c.consumer, extract(epoch FROM now() - d.due)::float8,
       (SELECT extract(epoch FROM now() - min(o.available_at))::float8 FROM /* schema */outbox AS o
        WHERE o.status = ` + tables.OutboxPending + ` AND o.available_at <= now()),
       r.due, r.n, EXISTS (SELECT 1 FROM /* schema */river_leader AS l WHERE l.expires_at >= now())
FROM (SELECT NULL) AS one
CROSS JOIN (
    SELECT count(*) AS n, extract(epoch FROM now() - min(s.run_at))::float8 AS due FROM /* schema */scheduled_replays AS s
    WHERE s.state IN ` + replayUnfinished + ` AND s.run_at <= now()
) AS r
LEFT JOIN consumers AS c ON c.consumer IS NOT NULL
LEFT JOIN LATERAL (
    SELECT min(i.available_at) AS due FROM /* schema */inbox AS i
    WHERE i.status = ` + tables.InboxPending + ` AND i.consumer = c.consumer
) AS d ON d.due <= now()`

// Overdue reads how long due work has waited: see Overdue.
func (a *Admin) Overdue(ctx context.Context) (*Overdue, error) {
	rows, err := a.pool.Query(ctx, ident.Render(overdueSQL, a.cfg.Schema))
	if err != nil {
		return nil, a.dbError(ctx, "overdue work", err)
	}
	defer rows.Close()
	out := &Overdue{Consumers: map[string]Duration{}}
	for rows.Next() {
		var (
			consumer              *string
			inbox, outbox, replay *float64
		)
		if err := rows.Scan(&out.At, &consumer, &inbox, &outbox, &replay, &out.Replays, &out.MaintainerLeads); err != nil {
			return nil, a.dbError(ctx, "overdue work", err)
		}
		out.At = out.At.UTC()
		if consumer != nil && inbox != nil {
			out.Consumers[*consumer] = *seconds(inbox)
		}
		out.Outbox, out.Replay = seconds(outbox), seconds(replay)
	}
	if err := rows.Err(); err != nil {
		return nil, a.dbError(ctx, "overdue work", err)
	}
	return out, nil
}
