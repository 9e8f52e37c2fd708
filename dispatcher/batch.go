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

// leaseExpiredError is recorded for a leased attempt whose worker never
// reported back before its lease ran out.
const leaseExpiredError = "lease expired before the attempt finished: the worker crashed, was killed, stalled, or lost its database connection"

// lostBatchError is recorded for an in-transaction attempt whose batch
// transaction never committed.
const lostBatchError = "the attempt's batch transaction never committed: the worker crashed, was killed, stalled past its lease, or lost its database connection"

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

// runBatch claims one batch and handles it, in one transaction: claim,
// record the claim (counting its attempts), run the in-transaction
// handlers, record the outcomes other than done, commit; then the leased
// handlers, one by one. It returns how many messages the claim returned; an
// error means the claim itself failed.
func (d *Dispatcher) runBatch() (int, error) {
	// One rescued message at a time per process: if it is the kind that
	// crashes its process, the next crash takes nothing else down with it.
	rescuing := d.rescuing.CompareAndSwap(false, true)
	defer func() {
		if rescuing {
			d.rescuing.Store(false)
		}
	}()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(d.loop.WorkContext()),
		bookkeepingTimeout+time.Duration(d.cfg.BatchSize)*d.cfg.HandlerTimeout)
	defer cancel()
	// The transaction holds its rows locked whatever their lease says. If
	// this process stalls (paused, cut off by the network) with the
	// transaction idle, the server ends it after a lease's worth of idleness,
	// so the rows come back as if the worker had crashed. A live handler is
	// never idle that long: HandlerTimeout is shorter than the lease.
	tx, err := d.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: d.q.beginBatch})
	if err != nil {
		return 0, fmt.Errorf("claim: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // a no-op after Commit
	b, err := d.claim(ctx, tx, rand.Int64(), rescuing)
	if err != nil {
		return 0, err
	}
	if rescuing && !b.rescue {
		d.rescuing.Store(false)
		rescuing = false
	}
	if b.claimed == 0 {
		return 0, nil
	}
	d.hooks.beforeHandlers(b.inTx)
	if !d.recordClaim(ctx, tx, b) {
		return b.claimed, nil
	}
	if !d.handleInTx(ctx, tx, b) {
		return b.claimed, nil
	}
	if len(b.leased) > 0 {
		d.hooks.beforeHandlers(b.leased)
		// Their leases started with the transaction; if in-transaction
		// handlers ran first, renew them at once.
		hb := d.startHeartbeat(b.token, b.leased, len(b.run) > 0)
		defer hb.close()
		d.handleLeased(b.token, b.leased, hb)
	}
	return b.claimed, nil
}

// batch is what one claim took.
type batch struct {
	token   int64
	xid     string // the batch transaction's id
	claimed int    // rows the claim took, including those it marked dead
	rescue  bool   // the batch is one rescued message
	inTx    []*claimed
	leased  []*claimed
	// run are the inTx messages whose handler will run: those the claim
	// record must count.
	run []*claimed
}

// ids returns the message ids of cs.
func ids(cs []*claimed) []string {
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.msg.ID
	}
	return ids
}

// claim takes a batch in tx (see claimSQL). Messages the claim marked dead
// (their lease expired on their last attempt) are only logged.
func (d *Dispatcher) claim(ctx context.Context, tx pgx.Tx, token int64, mayRescue bool) (*batch, error) {
	rows, err := tx.Query(ctx, d.q.claim, d.consumer, d.cfg.BatchSize, token, d.leasedTypes,
		d.cfg.Lease.Milliseconds(), mayRescue, leaseExpiredError)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	b := &batch{token: token}
	for rows.Next() {
		b.claimed++
		var (
			c        claimed
			status   string
			metadata []byte
		)
		m := &c.msg
		if err := rows.Scan(&m.ID, &status, &m.EventType, &m.Payload, &metadata, &m.OrderingKey,
			&m.Attempt, &m.MaxAttempts, &m.ReceivedAt, &c.seq, &b.rescue, &b.xid); err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		m.Consumer = d.consumer
		if b.rescue && status == "dead" { // its lost attempt was its last
			d.tel.Outcome(ctx, m.EventType, status, true)
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
		switch {
		case status == "running":
			b.leased = append(b.leased, &c)
		case c.problem == nil:
			b.run = append(b.run, &c)
			fallthrough
		default:
			b.inTx = append(b.inTx, &c)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	// Handle in arrival order: it costs nothing and surprises nobody.
	for _, cs := range [][]*claimed{b.inTx, b.run, b.leased} {
		slices.SortFunc(cs, func(a, b *claimed) int { return cmp.Compare(a.seq, b.seq) })
	}
	return b, nil
}

// recordClaim records b's claim from another session before its handlers
// run (see recordClaimSQL), when it has handlers to run in tx; leased
// messages are counted by the batch's commit, before they are called. It
// reports whether the batch may go on. When it may not, nothing has run
// and tx is to be rolled back: the claim is tried again.
func (d *Dispatcher) recordClaim(ctx context.Context, tx pgx.Tx, b *batch) bool {
	if len(b.run) == 0 {
		return true
	}
	var recorded, stale bool
	err := d.records.QueryRow(ctx, d.q.recordClaim, d.consumer, b.xid, ids(b.run)).Scan(&recorded, &stale)
	switch {
	case err != nil:
		d.cfg.Logger.Error("dispatcher: could not record a claim; its messages will be claimed again",
			slog.String("consumer", d.consumer), slog.String("error", err.Error()))
	case stale:
		// A lost batch's attempts are still to be counted, and its
		// messages may be in this one: count them first.
		_ = tx.Rollback(ctx)
		d.reconcile(ctx)
	case !recorded:
		d.cfg.Logger.Warn("dispatcher: the batch transaction ended before its handlers ran (stalled past the lease, or cut off); its messages will be claimed again",
			slog.String("consumer", d.consumer), slog.Int("messages", b.claimed))
	}
	return err == nil && recorded
}

// reconcile counts the attempts of lost batches (see reconcileSQL). If it
// fails, the next claim tries again: until then no batch of this consumer
// runs its handlers.
func (d *Dispatcher) reconcile(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, bookkeepingTimeout)
	defer cancel()
	rows, err := d.pool.Query(ctx, d.q.reconcile, d.consumer, lostBatchError, leaseExpiredError)
	if err != nil {
		d.cfg.Logger.Error("dispatcher: could not count the attempts of a lost batch; will try again",
			slog.String("consumer", d.consumer), slog.String("error", err.Error()))
		return
	}
	defer rows.Close()
	var m Message
	var status string
	for rows.Next() {
		if err := rows.Scan(&m.ID, &m.EventType, &m.Attempt, &status); err != nil {
			break
		}
		d.tel.Outcome(ctx, m.EventType, status, true)
		if status == "dead" {
			d.cfg.Logger.Error("dispatcher: message is dead: its last attempt never finished (its batch was lost)", d.attrs(&m)...)
		}
	}
	if err := rows.Err(); err != nil {
		d.cfg.Logger.Error("dispatcher: could not count the attempts of a lost batch; will try again",
			slog.String("consumer", d.consumer), slog.String("error", err.Error()))
	}
}

// handleInTx runs b's in-transaction handlers in tx, each in a savepoint,
// records every outcome but done in the same transaction, and commits. It
// reports whether the batch committed: if not, its leased messages were
// never handed their lease and run again later.
func (d *Dispatcher) handleInTx(ctx context.Context, tx pgx.Tx, b *batch) bool {
	fallback, err := d.runTx(ctx, tx, b)
	if err == nil {
		return true
	}
	d.cfg.Logger.Error("dispatcher: batch transaction failed",
		slog.String("consumer", d.consumer), slog.Int("messages", len(b.inTx)), slog.String("error", err.Error()))
	// The transaction is gone, and with it every write of this batch: its
	// messages are as before the claim. Record the failed attempts on a
	// fresh deadline (the transaction may have failed on running out of its
	// own). If that fails too, the claim record stays behind and the next
	// claim counts the batch as lost.
	_ = tx.Rollback(ctx)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
	defer cancel()
	if len(b.run) > 0 && b.rescue {
		// A rescued message's earlier lost attempt is recorded with its
		// reconciliation.
		d.reconcile(ctx)
		return false
	}
	if err := d.settle(ctx, b, fallback); err != nil {
		d.cfg.Logger.Error("dispatcher: could not record the failed batch's attempts; they will be counted as lost",
			slog.String("consumer", d.consumer), slog.String("error", err.Error()))
	}
	return false
}

// runTx is handleInTx's transaction. When it fails as a whole it returns
// the failed attempts to record outside it.
func (d *Dispatcher) runTx(ctx context.Context, tx pgx.Tx, b *batch) ([]outcome, error) {
	outcomes := make([]outcome, 0, len(b.inTx))
	for _, c := range b.inTx {
		if d.loop.Stopping() {
			outcomes = append(outcomes, released(c))
			continue
		}
		o, broken := d.runInSavepoint(ctx, tx, c)
		outcomes = append(outcomes, o)
		if broken != nil {
			// The connection is lost or unusable, so the transaction and
			// every neighbour's writes are gone. The culprit's attempt and
			// its neighbours' failures stand; the others run again.
			return failures(outcomes), broken
		}
	}
	// The claim marked every message done already: only the others are
	// written, usually none.
	if rest := slices.DeleteFunc(slices.Clone(outcomes), isDone); len(rest) > 0 {
		n, err := d.complete(ctx, tx, b.token, rest)
		if err != nil {
			return failures(d.failAll(b.inTx, fmt.Errorf("record outcomes: %w", err))), err
		}
		if n != len(rest) {
			// Unreachable while the rows are locked, unless a handler
			// changed its own message's row. Whatever the cause, roll
			// everything back, business writes included.
			return nil, fmt.Errorf("claim lost: %d of %d outcomes matched their row; the whole batch was rolled back", n, len(rest))
		}
	}
	if err := tx.Commit(ctx); err != nil {
		// Which message's writes failed at commit (a deferred constraint,
		// say) cannot be told, so each attempt counts as failed.
		return failures(d.failAll(b.inTx, fmt.Errorf("commit: %w", err))), err
	}
	d.observe(ctx, outcomes)
	return nil, nil
}

// settle records the failed attempts of a batch whose transaction failed
// (see settleSQL).
func (d *Dispatcher) settle(ctx context.Context, b *batch, failed []outcome) error {
	if len(b.run) == 0 {
		return nil // nothing was recorded, so nothing ran: the batch runs again
	}
	n := len(failed)
	ids, statuses, delays := make([]string, n), make([]string, n), make([]int64, n)
	errs, traces := make([]string, n), make([]*string, n)
	for i, o := range failed {
		ids[i], statuses[i], delays[i], errs[i] = o.id, o.status, o.delay.Milliseconds(), o.err
		if o.trace != "" {
			traces[i] = &failed[i].trace
		}
	}
	_, err := d.pool.Exec(ctx, d.q.settle, d.consumer, b.xid, ids, statuses, delays, errs, traces)
	return err
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
		tag, err := d.pool.Exec(renewCtx, d.q.renewLease, d.consumer, []string{c.msg.ID}, token, d.cfg.Lease.Milliseconds())
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
			slog.String("consumer", d.consumer), slog.String("error", err.Error()))
	case n < len(outcomes):
		// Another worker took the message over after our lease expired: its
		// outcome is the one that counts.
		d.cfg.Logger.Warn("dispatcher: an outcome was not recorded because another worker had taken the message over (lease expired)",
			slog.String("consumer", d.consumer), slog.Int("outcomes", len(outcomes)), slog.Int("recorded", n))
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

// failures keeps the outcomes that are failed attempts: not done, not
// given back.
func failures(outcomes []outcome) []outcome {
	return slices.DeleteFunc(outcomes, func(o outcome) bool { return isDone(o) || o.refund })
}

func isDone(o outcome) bool { return o.status == "done" }

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
	tag, err := db.Exec(ctx, d.q.complete, d.consumer, token, ids, statuses, delays, refunds, errs, traces)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

func (d *Dispatcher) attrs(m *Message, extra ...any) []any {
	return append([]any{
		slog.String("consumer", d.consumer),
		slog.String("message_id", m.ID),
		slog.String("event_type", m.EventType),
		slog.Int("attempt", m.Attempt),
	}, extra...)
}
