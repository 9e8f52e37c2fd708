package dispatcher

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgconn"
)

// complete records outcomes, fenced by token, and returns how many rows
// they matched.
func (d *Dispatcher) complete(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, token int64, outcomes []outcome) (int, error) {
	n := len(outcomes)
	// Statuses go as []string: pgx encodes no slice of a named string type
	// such as []pgbox.InboxStatus in the exec and simple-protocol modes.
	ids, statuses := make([]string, n), make([]string, n)
	delays, refunds := make([]int64, n), make([]int32, n)
	errs, traces, buckets := make([]*string, n), make([]*string, n), make([]int32, n)
	for i, o := range outcomes {
		ids[i], statuses[i], delays[i], buckets[i] = o.id, string(o.status), o.delay.Milliseconds(), o.bucket
		if o.refund {
			refunds[i] = 1
		}
		if o.err != "" {
			errs[i] = &outcomes[i].err
		}
		if o.trace != "" {
			traces[i] = &outcomes[i].trace
		}
	}
	tag, err := db.Exec(ctx, d.q.complete, d.q.byKey, d.consumer, token, ids, statuses, delays, refunds, errs, traces, buckets)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

// record completes outcomes outside a transaction. While it cannot, it
// retries, and the dispatcher claims nothing more (workloop.Record): a
// dispatcher that ran handlers whose outcomes go nowhere would run them
// again and again. Only Stop's deadline makes it give up; the lease then
// brings the messages back.
func (d *Dispatcher) record(ctx context.Context, token int64, outcomes []outcome) {
	var n int
	err := d.loop.Record("handler outcomes", func() error {
		ctx, cancel := context.WithTimeout(ctx, bookkeepingTimeout)
		defer cancel()
		var err error
		n, err = d.complete(ctx, d.pool, token, outcomes)
		return err
	})
	switch {
	case err != nil:
	case n < len(outcomes):
		// Another worker took the message over after our lease expired: its
		// outcome is the one that counts.
		d.cfg.Logger.Warn("dispatcher: an outcome was not recorded because another worker had taken the message over (lease expired)",
			slog.String("consumer", d.consumer), slog.Int("outcomes", len(outcomes)), slog.Int("recorded", n))
	default:
		d.observe(ctx, outcomes)
	}
}

// settle records the failed attempts of a batch whose transaction failed
// (see settleSQL), retrying as record does while it cannot. It returns an
// error only if Stop's deadline made it give up: the claim record then
// stays behind and the next claim counts the batch as lost.
func (d *Dispatcher) settle(ctx context.Context, b *batch, failed []outcome) error {
	if len(b.run) == 0 {
		return nil // nothing was recorded, so nothing ran: the batch runs again
	}
	n := len(failed)
	// []string statuses, as in complete.
	ids, statuses, delays := make([]string, n), make([]string, n), make([]int64, n)
	errs, traces := make([]string, n), make([]*string, n)
	for i, o := range failed {
		ids[i], statuses[i], delays[i], errs[i] = o.id, string(o.status), o.delay.Milliseconds(), o.err
		if o.trace != "" {
			traces[i] = &failed[i].trace
		}
	}
	err := d.loop.Record("the failed batch's attempts", func() error {
		ctx, cancel := context.WithTimeout(ctx, bookkeepingTimeout)
		defer cancel()
		_, err := d.pool.Exec(ctx, d.q.settle, d.q.byKey, d.consumer, b.xid, ids, statuses, delays, errs, traces)
		return err
	})
	if err == nil {
		d.loop.Progress(n) // failed attempts recorded: the messages move on
	}
	return err
}
