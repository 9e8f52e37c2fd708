package dispatcher

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/frontier"
)

// leaseExpiredError is recorded for a leased attempt whose worker never
// reported back before its lease ran out.
const leaseExpiredError = "lease expired before the attempt finished: the worker crashed, was killed, stalled, or lost its database connection"

// lostBatchError is recorded for an in-transaction attempt whose batch
// transaction never committed.
const lostBatchError = "the attempt's batch transaction never committed: the worker crashed, was killed, stalled past its lease, or lost its database connection"

// claim takes a batch in tx (see claimSQL), leaving the event types of
// skip alone. Messages the claim marked dead (their lease expired on their
// last attempt) are only logged.
func (d *Dispatcher) claim(ctx context.Context, tx pgx.Tx, token int64, mayRescue bool, skip []string) (*batch, error) {
	// The claim and, in the same round trip, the oldest transaction open
	// as it begins (for the frontier) and the end of claimPlanning.
	from := d.frontier.Next(time.Now())
	var q pgx.Batch
	q.Queue(frontier.OpenSinceSQL)
	q.Queue(d.q.claim, d.consumer, token, d.leasedTypes, d.cfg.Lease.Milliseconds(), mayRescue, leaseExpiredError, skip, from)
	for _, reset := range claimPlanned {
		q.Queue(reset)
	}
	results := tx.SendBatch(ctx, &q)
	defer results.Close()
	var openSince *time.Time
	if err := results.QueryRow().Scan(&openSince); err != nil {
		return nil, fmt.Errorf("claim: look for open transactions: %w", err)
	}
	b, err := d.readClaim(ctx, results)
	if err != nil {
		return nil, err
	}
	d.frontier.Took(from, b.oldest, openSince)
	b.token = token
	for range claimPlanned {
		if _, err := results.Exec(); err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
	}
	if err := results.Close(); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return b, nil
}

// readClaim reads the claim's rows into a batch.
func (d *Dispatcher) readClaim(ctx context.Context, results pgx.BatchResults) (*batch, error) {
	rows, err := results.Query()
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	b := &batch{}
	for rows.Next() {
		b.claimed++
		var (
			c        claimed
			status   pgbox.InboxStatus
			metadata []byte
		)
		m := &c.msg
		if err := rows.Scan(&m.ID, &status, &m.EventType, &m.Payload, &metadata, &m.OrderingKey,
			&m.Attempt, &m.MaxAttempts, &m.ReceivedAt, &c.seq, &b.rescue, &b.xid, &c.bucket, &b.oldest); err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		m.Consumer = d.consumer
		if b.rescue && status == pgbox.InboxDead { // its lost attempt was its last
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
		case status == pgbox.InboxRunning:
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
	// Held before its record exists (runBatch drops it), so that no other
	// worker of this process, reading the list later, can see the record
	// without it.
	d.held.Add(b.xid)
	err := d.records.QueryRow(ctx, d.q.recordClaim, d.consumer, b.xid, ids(b.run), d.held.List()).Scan(&recorded, &stale)
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

// reconcile counts the attempts of lost batches (see reconcileSQL), but
// for those this process holds (see claimrec.Held). If it fails, the next claim tries again: until then no batch of this consumer
// runs its handlers.
func (d *Dispatcher) reconcile(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, bookkeepingTimeout)
	defer cancel()
	rows, err := d.pool.Query(ctx, d.q.reconcile, d.q.byKey, d.consumer, lostBatchError, leaseExpiredError, d.held.List())
	if err != nil {
		d.cfg.Logger.Error("dispatcher: could not count the attempts of a lost batch; will try again",
			slog.String("consumer", d.consumer), slog.String("error", err.Error()))
		return
	}
	defer rows.Close()
	var m Message
	var status pgbox.InboxStatus
	for rows.Next() {
		if err := rows.Scan(&m.ID, &m.EventType, &m.Attempt, &status); err != nil {
			break
		}
		d.tel.Outcome(ctx, m.EventType, status, true)
		if status == pgbox.InboxDead {
			d.cfg.Logger.Error("dispatcher: message is dead: its last attempt never finished (its batch was lost)", d.attrs(&m)...)
		}
	}
	if err := rows.Err(); err != nil {
		d.cfg.Logger.Error("dispatcher: could not count the attempts of a lost batch; will try again",
			slog.String("consumer", d.consumer), slog.String("error", err.Error()))
	}
}
