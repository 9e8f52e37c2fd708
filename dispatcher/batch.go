package dispatcher

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/propagation"

	"github.com/pgbox/pgbox/internal/pgtext"
)

// bookkeepingTimeout bounds the dispatcher's own statements (claim, lock,
// complete). They run on a context that Stop does not cancel, so that
// outcomes are recorded even while shutting down.
const bookkeepingTimeout = 30 * time.Second

// Limits on what one error entry stores, so that a handler returning a
// huge error cannot bloat its row without bound.
const (
	maxErrorBytes = 8 << 10
	maxTraceBytes = 16 << 10
)

// leaseExpiredError is recorded for an attempt whose worker never reported
// back before its lease ran out.
const leaseExpiredError = "lease expired before the attempt finished: the worker crashed, was killed, stalled, or lost its database connection"

// claimed is a message a worker holds the claim to.
type claimed struct {
	handler Handler
	// problem, when set, fails the message without running a handler: an
	// unknown event type or metadata that cannot be decoded.
	problem error
	msg     Message
	seq     int64
}

// outcome is what became of a claimed message, as completeSQL records it.
type outcome struct {
	delay  time.Duration // before the next attempt, for pending
	err    string        // recorded in the history when non-empty
	id     string
	refund bool // give the attempt back (snooze, shutdown)
	status string
	trace  string

	eventType string // for metrics only
}

// runBatch claims one batch and handles it. It returns how many messages
// the claim returned; an error means the claim itself failed.
func (d *Dispatcher) runBatch() (int, error) {
	token := rand.Int64()
	// One rescued message at a time per process: if it is the kind that
	// crashes its process, the next crash takes nothing else down with it.
	mayRescue := d.rescuing.CompareAndSwap(false, true)
	batch, claimedN, rescued, err := d.claim(token, mayRescue)
	if mayRescue {
		if rescued {
			defer d.rescuing.Store(false)
		} else {
			d.rescuing.Store(false)
		}
	}
	if err != nil || len(batch) == 0 {
		return claimedN, err
	}
	if hook := d.hooks.afterClaim; hook != nil {
		ids := make([]string, 0, len(batch))
		for _, c := range batch {
			ids = append(ids, c.msg.ID)
		}
		hook(ids)
	}
	var inTx, leased []*claimed
	for _, c := range batch {
		if c.handler.leased != nil && c.problem == nil {
			leased = append(leased, c)
		} else {
			inTx = append(inTx, c)
		}
	}
	if len(leased) > 0 {
		hb := d.startHeartbeat(token, leased)
		defer hb.close()
		if len(inTx) > 0 {
			d.handleInTx(token, inTx)
		}
		d.handleLeased(token, leased, hb)
	} else {
		d.handleInTx(token, inTx)
	}
	return claimedN, nil
}

// claim takes a batch and returns the messages to handle, how many rows the
// claim took, and whether it rescued an expired lease. The first two differ
// by the messages the claim marked dead (their lease expired on their last
// attempt), which are only logged.
func (d *Dispatcher) claim(token int64, mayRescue bool) (batch []*claimed, n int, rescued bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), bookkeepingTimeout)
	defer cancel()
	rows, err := d.pool.Query(ctx, d.q.claim, d.cfg.Consumer, d.cfg.BatchSize, token, d.cfg.Lease.Milliseconds(), leaseExpiredError, mayRescue)
	if err != nil {
		return nil, 0, false, fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		n++
		var (
			c        claimed
			status   string
			metadata []byte
			rescue   bool
		)
		m := &c.msg
		if err := rows.Scan(&m.ID, &status, &m.EventType, &m.Payload, &metadata, &m.OrderingKey,
			&m.Attempt, &m.MaxAttempts, &m.ReceivedAt, &c.seq, &rescue); err != nil {
			return nil, 0, false, fmt.Errorf("claim: %w", err)
		}
		rescued = rescued || rescue
		m.Consumer = d.cfg.Consumer
		if rescue { // the lost attempt failed; a claim that marked it dead ended it
			d.tel.Outcome(ctx, m.EventType, status, true)
		}
		if status == "dead" {
			d.cfg.Logger.Error("dispatcher: message is dead: its last attempt never finished (lease expired)",
				d.attrs(m, slog.Int("attempts", m.Attempt))...)
			continue
		}
		if err := json.Unmarshal(metadata, &m.Metadata); err != nil {
			c.problem = fmt.Errorf("metadata is not a JSON object of strings: %w", err)
		}
		var ok bool
		if c.handler, ok = d.cfg.Handlers[m.EventType]; !ok && c.problem == nil {
			c.problem = fmt.Errorf("no handler for event type %q in consumer %q: add one to dispatcher.Config.Handlers, or discard the message", m.EventType, m.Consumer)
		}
		batch = append(batch, &c)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, false, fmt.Errorf("claim: %w", err)
	}
	// Handle in arrival order: it costs nothing and surprises nobody.
	slices.SortFunc(batch, func(a, b *claimed) int { return cmp.Compare(a.seq, b.seq) })
	return batch, n, rescued, nil
}

// handleInTx runs a batch's in-transaction handlers in one transaction,
// each in a savepoint, and records every outcome in the same transaction.
func (d *Dispatcher) handleInTx(token int64, batch []*claimed) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.loop.WorkContext()), bookkeepingTimeout+time.Duration(len(batch))*d.cfg.HandlerTimeout)
	defer cancel()
	fallback, err := d.runTx(ctx, token, batch)
	if err == nil {
		return
	}
	d.cfg.Logger.Error("dispatcher: batch transaction failed",
		slog.String("consumer", d.cfg.Consumer), slog.Int("messages", len(batch)), slog.String("error", err.Error()))
	if len(fallback) == 0 {
		return
	}
	// The transaction is gone, and with it every write of this batch.
	// Record what happened on a fresh connection, with a fresh deadline (the
	// transaction may have failed on running out of its own); if that fails
	// too, the lease will expire and the messages will be claimed again.
	d.record(context.WithoutCancel(d.loop.WorkContext()), token, fallback)
}

// runTx is handleInTx's transaction. When it fails as a whole it returns
// the outcomes to record outside it.
func (d *Dispatcher) runTx(ctx context.Context, token int64, batch []*claimed) ([]outcome, error) {
	// The transaction holds its rows locked whatever their lease says. If
	// this process stalls (paused, cut off by the network) with the
	// transaction idle, the server ends it after a lease's worth of idleness,
	// so the rows come back as if the worker had crashed. A live handler is
	// never idle that long: HandlerTimeout is shorter than the lease.
	tx, err := d.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: d.q.beginBatch})
	if err != nil {
		return d.releaseAll(batch), fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit

	held, err := d.lockClaimed(ctx, tx, token, batch)
	if err != nil {
		return d.releaseAll(batch), fmt.Errorf("lock claimed messages: %w", err)
	}
	outcomes := make([]outcome, 0, len(held))
	for i, c := range held {
		if d.loop.Stopping() {
			outcomes = append(outcomes, released(c))
			continue
		}
		o, broken := d.runInSavepoint(ctx, tx, c)
		if broken != nil {
			// The connection is lost or unusable, so the transaction and
			// every neighbour's writes are gone. The culprit's attempt and
			// its neighbours' failures stand; the neighbours that had
			// succeeded lose nothing and run again.
			fallback := append(outcomes, o)
			for j, prev := range fallback {
				if prev.status == "done" {
					fallback[j] = released(held[j])
				}
			}
			return append(fallback, d.releaseAll(held[i+1:])...), broken
		}
		outcomes = append(outcomes, o)
	}
	if len(outcomes) == 0 {
		return nil, nil
	}
	n, err := d.complete(ctx, tx, token, outcomes)
	if err != nil {
		return d.failAll(held, fmt.Errorf("record outcomes: %w", err)), err
	}
	if n != len(outcomes) {
		// Unreachable while the rows are locked, unless a handler changed
		// its own message's row. Whatever the cause, a done mark that
		// matches fewer rows than it should means a claim was lost: roll
		// everything back, business writes included. The messages still
		// ours are claimed again when their lease expires.
		return nil, fmt.Errorf("claim lost: %d of %d outcomes matched their row; the whole batch was rolled back", n, len(outcomes))
	}
	if err := tx.Commit(ctx); err != nil {
		// Which message's writes failed at commit (a deferred constraint,
		// say) cannot be told, so each attempt counts as failed.
		return d.failAll(held, fmt.Errorf("commit: %w", err)), err
	}
	d.observe(ctx, outcomes)
	return nil, nil
}

// lockClaimed locks the batch's rows whose claim is still this worker's and
// returns those messages. The others were taken over after our lease
// expired; they are logged and left alone.
func (d *Dispatcher) lockClaimed(ctx context.Context, tx pgx.Tx, token int64, batch []*claimed) ([]*claimed, error) {
	ids := make([]string, len(batch))
	for i, c := range batch {
		ids[i] = c.msg.ID
	}
	rows, err := tx.Query(ctx, d.q.lockClaimed, d.cfg.Consumer, ids, token)
	if err != nil {
		return nil, err
	}
	ours, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	held := make([]*claimed, 0, len(batch))
	for _, c := range batch {
		if slices.Contains(ours, c.msg.ID) {
			held = append(held, c)
		} else {
			d.cfg.Logger.Warn("dispatcher: claim lost before the handler ran (lease expired); another worker has the message",
				d.attrs(&c.msg)...)
		}
	}
	return held, nil
}

// runInSavepoint runs one message's handler in a savepoint of tx (see
// handlerTx). broken is set when the transaction can no longer be used.
func (d *Dispatcher) runInSavepoint(ctx context.Context, tx pgx.Tx, c *claimed) (o outcome, broken error) {
	if c.problem != nil {
		return d.failed(c, c.problem, ""), nil
	}
	htx := &handlerTx{ctx: ctx, outer: tx}
	handlerErr, trace := d.call(&c.msg, func(ctx context.Context) error {
		htx.ctx = ctx
		return c.handler.inTx(ctx, htx, &c.msg)
	})
	failure, broken := htx.finish(ctx, handlerErr)
	if failure == nil {
		return done(c), nil
	}
	if broken != nil && handlerErr == nil {
		return d.failed(c, fmt.Errorf("savepoint: %w", failure), ""), broken
	}
	return d.failed(c, failure, trace), broken
}

// handleLeased runs a batch's leased handlers one by one, outside any
// transaction: renew the lease, call, record. hb keeps the leases of those
// still waiting alive.
func (d *Dispatcher) handleLeased(token int64, batch []*claimed, hb *heartbeat) {
	ctx := context.WithoutCancel(d.loop.WorkContext())
	for i, c := range batch {
		if d.loop.Stopping() {
			d.record(ctx, token, d.releaseAll(batch[i:]))
			return
		}
		hb.starting(c.msg.ID)
		renewCtx, cancel := context.WithTimeout(ctx, bookkeepingTimeout)
		tag, err := d.pool.Exec(renewCtx, d.q.renewLease, d.cfg.Consumer, []string{c.msg.ID}, token, d.cfg.Lease.Milliseconds())
		cancel()
		if err != nil {
			d.cfg.Logger.Error("dispatcher: could not renew a lease; the batch's remaining messages will be retried when their lease expires",
				d.attrs(&c.msg, slog.String("error", err.Error()))...)
			return
		}
		if tag.RowsAffected() == 0 {
			d.cfg.Logger.Warn("dispatcher: claim lost before the handler ran (lease expired); another worker has the message", d.attrs(&c.msg)...)
			continue
		}
		handlerErr, trace := d.call(&c.msg, func(ctx context.Context) error { return c.handler.leased(ctx, &c.msg) })
		if handlerErr == nil {
			d.record(ctx, token, []outcome{done(c)})
		} else {
			d.record(ctx, token, []outcome{d.failed(c, handlerErr, trace)})
		}
	}
}

// record completes outcomes outside a transaction, logging a failure: the
// lease then brings the messages back.
func (d *Dispatcher) record(ctx context.Context, token int64, outcomes []outcome) {
	ctx, cancel := context.WithTimeout(ctx, bookkeepingTimeout)
	defer cancel()
	n, err := d.complete(ctx, d.pool, token, outcomes)
	switch {
	case err != nil:
		d.cfg.Logger.Error("dispatcher: could not record an outcome; the message will be retried when its lease expires",
			slog.String("consumer", d.cfg.Consumer), slog.String("error", err.Error()))
	case n < len(outcomes):
		// Another worker took the message over after our lease expired: its
		// outcome is the one that counts.
		d.cfg.Logger.Warn("dispatcher: an outcome was not recorded because another worker had taken the message over (lease expired)",
			slog.String("consumer", d.cfg.Consumer), slog.Int("outcomes", len(outcomes)), slog.Int("recorded", n))
	default:
		d.observe(ctx, outcomes)
	}
}

// call runs a handler for m with its own timeout and m's trace context,
// turning a panic into an error and its stack.
func (d *Dispatcher) call(m *Message, fn func(ctx context.Context) error) (err error, trace string) {
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
	return fn(ctx), ""
}

func done(c *claimed) outcome {
	return outcome{id: c.msg.ID, eventType: c.msg.EventType, status: "done"}
}

// released gives the message back: pending now, the attempt refunded.
func released(c *claimed) outcome {
	return outcome{id: c.msg.ID, status: "pending", refund: true}
}

func (d *Dispatcher) releaseAll(batch []*claimed) []outcome {
	out := make([]outcome, 0, len(batch))
	for _, c := range batch {
		out = append(out, released(c))
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

// failed decides what a failed attempt leads to: a release if the
// dispatcher is stopping, a snooze, death, or a retry after backoff.
func (d *Dispatcher) failed(c *claimed, err error, trace string) outcome {
	m := &c.msg
	var (
		snooze    *SnoozeError
		permanent *PermanentError
	)
	isPermanent := errors.As(err, &permanent)
	switch {
	case errors.As(err, &snooze):
		return outcome{id: m.ID, status: "pending", delay: snooze.After, refund: true}
	case !isPermanent && d.loop.CancelledByStop():
		// Stop cancelled the handler: not the message's fault.
		return released(c)
	}
	o := outcome{id: m.ID, eventType: m.EventType, err: pgtext.Clean(err.Error(), maxErrorBytes), trace: pgtext.Clean(trace, maxTraceBytes)}
	switch {
	case isPermanent:
		o.status = "dead"
		d.cfg.Logger.Error("dispatcher: message is dead: permanent error", d.attrs(m, slog.String("error", o.err))...)
	case m.Attempt >= m.MaxAttempts:
		o.status = "dead"
		d.cfg.Logger.Error("dispatcher: message is dead: out of attempts", d.attrs(m, slog.String("error", o.err))...)
	default:
		o.status = "pending"
		o.delay = max(d.cfg.RetryBackoffFunc(m.Attempt), 0)
		d.cfg.Logger.Warn("dispatcher: handler failed; will retry", d.attrs(m, slog.Duration("retry_in", o.delay), slog.String("error", o.err))...)
	}
	return o
}

// complete records outcomes, fenced by token, and returns how many rows
// they matched.
func (d *Dispatcher) complete(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, token int64, outcomes []outcome) (int, error) {
	n := len(outcomes)
	ids, statuses := make([]string, n), make([]string, n)
	delays, refunds := make([]int64, n), make([]int32, n)
	errs, traces := make([]*string, n), make([]*string, n)
	for i, o := range outcomes {
		ids[i], statuses[i], delays[i] = o.id, o.status, o.delay.Milliseconds()
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
	tag, err := db.Exec(ctx, d.q.complete, d.cfg.Consumer, token, ids, statuses, delays, refunds, errs, traces)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

func (d *Dispatcher) attrs(m *Message, extra ...any) []any {
	return append([]any{
		slog.String("consumer", d.cfg.Consumer),
		slog.String("message_id", m.ID),
		slog.String("event_type", m.EventType),
		slog.Int("attempt", m.Attempt),
	}, extra...)
}
