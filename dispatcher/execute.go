package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/propagation"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/dberr"
	"github.com/pgbox/pgbox/internal/pgtext"
)

// Limits on what one error entry stores, so that a handler returning a
// huge error cannot bloat its row without bound.
const (
	maxErrorBytes = 8 << 10
	maxTraceBytes = 16 << 10
)

// handleInTx runs b's in-transaction handlers in tx, each in a savepoint,
// records every outcome but done in the same transaction, and commits. It
// reports whether the batch committed: if not, its leased messages were
// never handed their lease and run again later.
//
// A database outage (a failover or switchover, a restart: dberr.Cut) that
// cuts the transaction is not its messages' fault: the attempts it cut are
// given back, with nothing in their history (see runTx), and only the
// attempts that failed before it are recorded.
func (d *Dispatcher) handleInTx(ctx context.Context, tx pgx.Tx, b *batch) bool {
	fallback, cut, err := d.runTx(ctx, tx, b)
	if err == nil {
		return true
	}
	if cut {
		d.cfg.Logger.Warn("dispatcher: the database cut the batch transaction (failover, switchover or restart?); the attempts it cut are given back",
			slog.String("consumer", d.consumer), slog.Int("messages", len(b.inTx)), slog.String("error", err.Error()))
	} else {
		d.cfg.Logger.Error("dispatcher: batch transaction failed",
			slog.String("consumer", d.consumer), slog.Int("messages", len(b.inTx)), slog.String("error", err.Error()))
	}
	// The transaction is gone, and with it every write of this batch: its
	// messages are as before the claim. Record the failed attempts on a
	// fresh deadline (the transaction may have failed on running out of its
	// own), or, when the outage cut them all, take back the claim record
	// alone, the refund: it waits for the database to answer again, and is
	// fenced by the batch's transaction id. If that fails too, the claim
	// record stays behind and the next claim counts the batch as lost.
	_ = tx.Rollback(ctx)
	ctx = context.WithoutCancel(ctx)
	if len(b.run) > 0 && b.rescue && !cut {
		// A rescued message's earlier lost attempt is recorded with its
		// reconciliation, this batch's own record included.
		d.held.Drop(b.xid)
		d.reconcile(ctx)
		return false
	}
	_ = d.settle(ctx, b, fallback) // a failure is logged, and the next claim counts the batch as lost
	return false
}

// runTx is handleInTx's transaction. When it fails as a whole it returns
// the failed attempts to record outside it, and whether a database outage
// cut it (cut): then the attempts it cut are not among them.
//
// A cut connection does not tell an outage from a handler that broke its
// own session (by crashing its server backend, say): a message is given
// its cut attempt back at most maxCutRefunds times (see cuts), so that
// such a handler's message still ends dead. A handler that ran out of its
// HandlerTimeout is not given its attempt back: pgx may close its
// connection to end its statement.
func (d *Dispatcher) runTx(ctx context.Context, tx pgx.Tx, b *batch) (fallback []outcome, cut bool, err error) {
	outcomes := make([]outcome, 0, len(b.inTx))
	for _, c := range b.inTx {
		if d.loop.Stopping() {
			outcomes = append(outcomes, released(c))
			continue
		}
		o, broken, cut := d.runInSavepoint(ctx, tx, b, c)
		outcomes = append(outcomes, o)
		if broken != nil {
			// The connection is lost or unusable, so the transaction and
			// every neighbour's writes are gone. The culprit's attempt
			// (unless an outage cut it) and its neighbours' failures
			// stand; the others run again.
			return failures(outcomes), cut, broken
		}
	}
	// The claim marked every message done already: only the others are
	// written, usually none.
	if rest := slices.DeleteFunc(slices.Clone(outcomes), isDone); len(rest) > 0 {
		n, err := d.complete(ctx, tx, b.token, rest)
		if dberr.Cut(err) {
			return d.cutAll(b.inTx, outcomes, fmt.Errorf("record outcomes: %w", err)), true, err
		}
		if err != nil {
			return failures(d.failAll(b.inTx, fmt.Errorf("record outcomes: %w", err))), false, err
		}
		if n != len(rest) {
			// Unreachable while the rows are locked, unless a handler
			// changed its own message's row. Whatever the cause, roll
			// everything back, business writes included.
			return nil, false, fmt.Errorf("claim lost: %d of %d outcomes matched their row; the whole batch was rolled back", n, len(rest))
		}
	}
	if err := tx.Commit(ctx); err != nil {
		if dberr.Cut(err) {
			// The commit may even have happened: settleSQL then finds
			// the messages done, and changes nothing.
			return d.cutAll(b.inTx, outcomes, fmt.Errorf("commit: %w", err)), true, err
		}
		// Which message's writes failed at commit (a deferred constraint,
		// say) cannot be told, so each attempt counts as failed.
		return failures(d.failAll(b.inTx, fmt.Errorf("commit: %w", err))), false, err
	}
	d.observe(ctx, outcomes)
	return nil, false, nil
}

// runInSavepoint runs one message's handler of batch b in a savepoint of
// tx (see handlerTx), unless its event type's dependency is down and b
// does not hold its probe (see outages): then it gives the message back.
// broken is set when the transaction can no longer be used, and cut when
// a database outage broke it: the message is then given back.
func (d *Dispatcher) runInSavepoint(ctx context.Context, tx pgx.Tx, b *batch, c *claimed) (o outcome, broken error, cut bool) {
	if c.problem != nil {
		return d.failed(c, c.problem, ""), nil, false
	}
	epoch, ok := d.outages.gate(c.msg.EventType, b.probes)
	if !ok {
		return released(c), nil, false
	}
	htx := &handlerTx{ctx: ctx, outer: tx}
	trace, handlerErr := d.call(&c.msg, func(ctx context.Context) error {
		htx.ctx = ctx
		return c.handler.inTx(ctx, htx, &c.msg)
	})
	d.outages.report(c.msg.EventType, epoch, handlerErr)
	failure, broken := htx.finish(ctx, handlerErr)
	switch {
	case failure == nil:
		return done(c), nil, false
	case dberr.Cut(broken) && !errors.Is(handlerErr, context.DeadlineExceeded):
		if d.cuts.refund(c.msg.ID) {
			return released(c), broken, true
		}
		return d.failed(c, failure, trace), broken, true
	case broken != nil && handlerErr == nil:
		return d.failed(c, fmt.Errorf("savepoint: %w", failure), ""), broken, false
	}
	return d.failed(c, failure, trace), broken, false
}

// handleLeased runs the leased handlers of b one by one, outside any
// transaction: renew the lease, call, record; or give the message back
// uncalled if its event type's dependency is down and b does not hold its
// probe (see outages). hb keeps the leases of those still waiting alive.
func (d *Dispatcher) handleLeased(b *batch, hb *heartbeat) {
	token, batch := b.token, b.leased
	ctx := context.WithoutCancel(d.loop.WorkContext())
	givenBack := map[string]bool{} // ids of messages given back uncalled
	// left returns the messages from the i-th on not given back yet.
	left := func(i int) []*claimed {
		return slices.DeleteFunc(slices.Clone(batch[i:]), func(c *claimed) bool { return givenBack[c.msg.ID] })
	}
	for i, c := range batch {
		if givenBack[c.msg.ID] {
			continue
		}
		if d.loop.Stopping() {
			d.record(ctx, token, d.releaseAll(left(i)))
			return
		}
		hb.starting(c.msg.ID)
		epoch, ok := d.outages.gate(c.msg.EventType, b.probes)
		if !ok {
			// Give back, in one go, every message left whose event type is
			// held back as this one's is.
			held := d.outages.held(batch[i:], b.probes)
			for _, h := range held {
				hb.starting(h.msg.ID)
				givenBack[h.msg.ID] = true
			}
			d.record(ctx, token, d.releaseAll(held))
			continue
		}
		renewCtx, cancel := context.WithTimeout(ctx, bookkeepingTimeout)
		tag, err := d.pool.Exec(renewCtx, d.q.renewLease, d.consumer, []string{c.msg.ID}, token, d.cfg.Lease.Milliseconds(), []int32{c.bucket})
		cancel()
		if dberr.Cut(err) {
			// Not the messages' fault: give back those left uncalled, as
			// soon as the database answers again (record waits for it),
			// fenced by the claim token.
			d.cfg.Logger.Warn("dispatcher: the database is unavailable (failover, switchover or restart?); the batch's remaining leased messages are given back uncalled",
				d.attrs(&c.msg, slog.String("error", err.Error()))...)
			d.record(ctx, token, d.releaseAll(left(i)))
			return
		}
		if err != nil {
			d.cfg.Logger.Error("dispatcher: could not renew a lease; the batch's remaining messages will be retried when their lease expires",
				d.attrs(&c.msg, slog.String("error", err.Error()))...)
			return
		}
		if tag.RowsAffected() == 0 {
			d.cfg.Logger.Warn("dispatcher: claim lost before the handler ran (lease expired); another worker has the message", d.attrs(&c.msg)...)
			continue
		}
		trace, handlerErr := d.call(&c.msg, func(ctx context.Context) error { return c.handler.leased(ctx, &c.msg) })
		d.outages.report(c.msg.EventType, epoch, handlerErr)
		if handlerErr == nil {
			d.record(ctx, token, []outcome{done(c)})
		} else {
			d.record(ctx, token, []outcome{d.failed(c, handlerErr, trace)})
		}
		if c.msg.OrderingKey != "" { // its key's next message may be behind the frontier
			d.frontier.Rewind(c.msg.ReceivedAt)
		}
	}
}

// call runs a handler for m with its own timeout and m's trace context,
// turning a panic into an error and its stack (trace).
func (d *Dispatcher) call(m *Message, fn func(ctx context.Context) error) (trace string, err error) {
	ctx, cancel := context.WithTimeout(d.loop.WorkContext(), d.cfg.HandlerTimeout)
	defer cancel()
	ctx = d.cfg.Propagator.Extract(ctx, propagation.MapCarrier(m.Metadata))
	ctx, end := d.tel.Handling(ctx, m.ID, m.EventType, m.Attempt)
	defer func() { end(err) }() // after the recover below, so a panic counts as an error
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
			trace = string(debug.Stack())
		}
	}()
	return "", fn(ctx)
}

// failed decides what a failed attempt leads to: a release if the
// dispatcher is stopping, a snooze, death, or a retry after backoff.
func (d *Dispatcher) failed(c *claimed, err error, trace string) outcome {
	m := &c.msg
	var (
		snooze      *SnoozeError
		permanent   *PermanentError
		unavailable *UnavailableError
	)
	isPermanent := errors.As(err, &permanent)
	switch {
	case errors.As(err, &snooze):
		return outcome{id: m.ID, bucket: c.bucket, status: pgbox.InboxPending, delay: snooze.After, refund: true}
	case !isPermanent && errors.As(err, &unavailable):
		// Not the message's fault: pending again at once, the attempt
		// refunded and nothing recorded on it; the outages hold its event
		// type back, and say why.
		return outcome{id: m.ID, bucket: c.bucket, status: pgbox.InboxPending, refund: true, unavailable: true}
	case !isPermanent && d.loop.CancelledByStop():
		// Stop cancelled the handler: not the message's fault.
		return released(c)
	}
	o := outcome{id: m.ID, bucket: c.bucket, eventType: m.EventType, err: pgtext.Clean(err.Error(), maxErrorBytes), trace: pgtext.Clean(trace, maxTraceBytes)}
	switch {
	case isPermanent:
		o.status = pgbox.InboxDead
		d.cfg.Logger.Error("dispatcher: message is dead: permanent error", d.attrs(m, slog.String("error", o.err))...)
	case m.Attempt >= m.MaxAttempts:
		o.status = pgbox.InboxDead
		d.cfg.Logger.Error("dispatcher: message is dead: out of attempts", d.attrs(m, slog.String("error", o.err))...)
	default:
		o.status = pgbox.InboxPending
		o.delay = max(d.cfg.RetryBackoffFunc(m.Attempt), 0)
		d.cfg.Logger.Warn("dispatcher: handler failed; will retry", d.attrs(m, slog.Duration("retry_in", o.delay), slog.String("error", o.err))...)
	}
	return o
}

// failures keeps the outcomes that are failed attempts: not done, not
// given back.
func failures(outcomes []outcome) []outcome {
	return slices.DeleteFunc(outcomes, func(o outcome) bool { return isDone(o) || o.refund })
}

func isDone(o outcome) bool { return o.status == pgbox.InboxDone }

func done(c *claimed) outcome {
	return outcome{id: c.msg.ID, bucket: c.bucket, eventType: c.msg.EventType, status: pgbox.InboxDone}
}

// released gives the message back: pending now, the attempt refunded.
func released(c *claimed) outcome {
	return outcome{id: c.msg.ID, bucket: c.bucket, status: pgbox.InboxPending, refund: true}
}

func (d *Dispatcher) releaseAll(batch []*claimed) []outcome {
	out := make([]outcome, 0, len(batch))
	for _, c := range batch {
		out = append(out, released(c))
	}
	return out
}

// cutAll returns the failed attempts to record of a batch whose outcomes
// (one per message of batch) a database outage lost with its transaction
// (err): its failures, and the attempts of the others that cuts gives back
// no more.
func (d *Dispatcher) cutAll(batch []*claimed, outcomes []outcome, err error) []outcome {
	out := failures(slices.Clone(outcomes))
	for i, o := range outcomes {
		if isDone(o) && !d.cuts.refund(o.id) {
			out = append(out, d.failed(batch[i], err, ""))
		}
	}
	return out
}

func (d *Dispatcher) failAll(batch []*claimed, err error) []outcome {
	out := make([]outcome, 0, len(batch))
	for _, c := range batch {
		out = append(out, d.failed(c, err, ""))
	}
	return out
}
