package pgboxtest

import (
	"context"
	"fmt"
	"time"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/tables"
)

// Polling bounds of WaitDrained: it looks often at first, when work is
// likeliest to be just finishing, then backs off so that a long wait does
// not flood the database.
const (
	drainPollMin = 5 * time.Millisecond
	drainPollMax = 100 * time.Millisecond
)

// drainSQL counts the inbox and outbox rows that are still work to do.
//
// Pending rows count whether due now or later: a row in backoff after a
// failure, or snoozed, is work the dispatcher or relay will come back to.
// The only pending rows left out are those held behind a dead row of their
// ordering key: they wait for an operator (replay or discard the dead
// head), not for time, so waiting for them would never end. Dead, done,
// discarded and published rows are finished.
const drainSQL = `
SELECT ip.n, ip.backoff, ir.n, op.n, op.backoff, orun.n
FROM (SELECT count(*) AS n, count(*) FILTER (WHERE i.available_at > now()) AS backoff
      FROM /* schema */inbox AS i
      WHERE i.status = ` + tables.InboxPending + ` AND NOT ` + tables.InboxBehindDead + `) AS ip,
     (SELECT count(*) AS n FROM /* schema */inbox WHERE status = ` + tables.InboxRunning + `) AS ir,
     (SELECT count(*) AS n, count(*) FILTER (WHERE o.available_at > now()) AS backoff
      FROM /* schema */outbox AS o
      WHERE o.status = ` + tables.OutboxPending + ` AND NOT ` + tables.OutboxBehindDead + `) AS op,
     (SELECT count(*) AS n FROM /* schema */outbox WHERE status = ` + tables.OutboxRunning + `) AS orun`

// WaitDrained returns nil once schema's inbox and outbox hold no work: no
// row pending or running, for any consumer. It looks at the committed
// state, in one statement, every few milliseconds.
//
// "Pending" includes rows waiting out a backoff after a failed attempt, and
// snoozed rows: WaitDrained waits for their retries too, so keep
// dispatcher.Config.RetryBackoffFunc and relay.Config.RetryBackoffFunc short
// in tests. Rows held behind a dead row of their ordering key are not
// waited for (only an operator frees them), and dead rows themselves count
// as finished: check for them separately if a test must not produce any.
//
// Something must be draining: a running dispatcher for every consumer with
// pending messages, and a relay if the outbox has rows. Otherwise
// WaitDrained waits until ctx ends, and then returns an error that says
// what was left, wrapping ctx's error. It needs no sleeps in the test that
// calls it: give it a ctx with a deadline (tb.Context() and a timeout).
func WaitDrained(ctx context.Context, db pgbox.Querier, schema string) error {
	if err := ident.ValidateSchema(schema); err != nil {
		return fmt.Errorf("pgboxtest: %w", err)
	}
	q := ident.Render(drainSQL, schema)
	var last *work
	wait := drainPollMin
	for {
		var w work
		err := db.QueryRow(ctx, q).Scan(&w.inPending, &w.inBackoff, &w.inRunning, &w.outPending, &w.outBackoff, &w.outRunning)
		switch {
		case err != nil && ctx.Err() != nil:
			return notDrained(schema, last, ctx.Err())
		case err != nil:
			return fmt.Errorf("pgboxtest: wait for schema %s to drain: %w", schema, err)
		case w.done():
			return nil
		}
		last = &w
		select {
		case <-ctx.Done():
			return notDrained(schema, last, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, drainPollMax)
	}
}

// work is what drainSQL counts.
type work struct {
	inPending, inBackoff, inRunning, outPending, outBackoff, outRunning int64
}

func (w *work) done() bool { return w.inPending+w.inRunning+w.outPending+w.outRunning == 0 }

// notDrained says what was left when WaitDrained gave up.
func notDrained(schema string, last *work, cause error) error {
	if last == nil {
		return fmt.Errorf("pgboxtest: schema %s did not drain: no count finished in time: %w", schema, cause)
	}
	return fmt.Errorf("pgboxtest: schema %s did not drain: inbox has %d pending (%d in backoff) and %d running, outbox %d pending (%d in backoff) and %d running; is a dispatcher running for each consumer, and a relay? %w",
		schema, last.inPending, last.inBackoff, last.inRunning, last.outPending, last.outBackoff, last.outRunning, cause)
}
