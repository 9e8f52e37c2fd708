package dispatcher

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox"
)

// bookkeepingTimeout bounds the dispatcher's own statements (claim, lock,
// complete). They run on a context that Stop does not cancel, so that
// outcomes are recorded even while shutting down.
const bookkeepingTimeout = 30 * time.Second

// runBatch claims one batch and handles it, in one transaction: claim,
// record the claim (counting its attempts), run the in-transaction
// handlers, record the outcomes other than done, commit; then the leased
// handlers, one by one. It returns how many messages the claim returned; an
// error means the claim itself failed.
//
// The steps live by role: claim.go claims the batch and records the claim,
// execute.go runs the handlers and decides their outcomes, complete.go
// writes the outcomes down.
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
	if err := d.refreshPauses(ctx); err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	whole, skip := d.pauses.paused()
	if whole {
		return 0, nil
	}
	skip, probes := d.outages.skip(time.Now(), skip)
	defer d.outages.release(probes)
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
	b, err := d.claim(ctx, tx, d.proc.Token(), rescuing, skip)
	if err != nil {
		return 0, err
	}
	b.probes = probes
	if rescuing && !b.rescue {
		d.rescuing.Store(false)
		rescuing = false
	}
	if b.claimed == 0 {
		return 0, nil
	}
	d.hooks.beforeHandlers(b.inTx)
	defer d.held.Drop(b.xid) // see claimrec.Held: settled or committed by then
	if !d.recordClaim(ctx, tx, b) {
		return b.claimed, nil
	}
	if !d.handleInTx(ctx, tx, b) {
		return b.claimed, nil
	}
	if arrived, ok := firstKeyed(b.inTx); ok { // their keys' next messages may be behind the frontier
		d.frontier.Rewind(arrived)
	}
	if len(b.leased) > 0 {
		d.hooks.beforeHandlers(b.leased)
		// Their leases started with the transaction; if in-transaction
		// handlers ran first, renew them at once.
		hb := d.startHeartbeat(b.token, b.leased, len(b.run) > 0)
		defer hb.close()
		d.handleLeased(b, hb)
	}
	return b.claimed, nil
}

// batch is what one claim took.
type batch struct {
	token   int64
	xid     string // the batch transaction's id
	claimed int    // rows the claim took, including those it marked dead
	rescue  bool   // the batch is one rescued message
	// oldest is the oldest available_at among the fresh messages claimed,
	// nil if none (see frontier).
	oldest *time.Time
	inTx   []*claimed
	leased []*claimed
	// run are the inTx messages whose handler will run: those the claim
	// record must count.
	run []*claimed
	// probes are the event types in an outage whose probe this batch
	// holds (see outages).
	probes map[string]*probe
}

// claimed is a message a worker holds the claim to.
type claimed struct {
	handler Handler
	// problem, when set, fails the message without running a handler: an
	// unknown event type or metadata that cannot be decoded.
	problem error
	msg     Message
	seq     int64
	bucket  int32 // the inbox partition's bucket, to find its row again
}

// outcome is what became of a claimed message, as completeSQL records it.
type outcome struct {
	bucket int32         // the message's inbox bucket
	delay  time.Duration // before the next attempt, for pending
	err    string        // recorded in the history when non-empty
	id     string
	refund bool // give the attempt back (snooze, shutdown, Unavailable)
	// unavailable says the handler returned Unavailable.
	unavailable bool
	status      pgbox.InboxStatus
	trace       string

	eventType string // for metrics only
}

// firstKeyed returns the earliest arrival (received_at) among the messages
// of cs that have an ordering key, and whether there is one.
func firstKeyed(cs []*claimed) (arrived time.Time, ok bool) {
	for _, c := range cs {
		if c.msg.OrderingKey != "" && (!ok || c.msg.ReceivedAt.Before(arrived)) {
			arrived, ok = c.msg.ReceivedAt, true
		}
	}
	return arrived, ok
}

// ids returns the message ids of cs.
func ids(cs []*claimed) []string {
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.msg.ID
	}
	return ids
}

func (d *Dispatcher) attrs(m *Message, extra ...any) []any {
	return append([]any{
		slog.String("consumer", d.consumer),
		slog.String("message_id", m.ID),
		slog.String("event_type", m.EventType),
		slog.Int("attempt", m.Attempt),
	}, extra...)
}
