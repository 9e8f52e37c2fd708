package relay

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/pgtext"
)

const (
	// bookkeepingTimeout bounds the relay's own statements. They run on a
	// context Stop does not cancel, so outcomes are recorded while stopping.
	bookkeepingTimeout = 30 * time.Second
	// maxErrorBytes bounds a recorded publish error.
	maxErrorBytes = 8 << 10
	// lostBatchError is recorded for an attempt whose batch transaction
	// never committed.
	lostBatchError = "the publish's batch transaction never committed: the relay crashed, was killed, stalled past its lease, or lost its database connection; publishing again"
	// leaseExpiredError is recorded for an attempt of a relay older than
	// version 12, which marked rows running, that never reported back
	// before its lease ran out.
	leaseExpiredError = "lease expired before the publish was recorded: the relay crashed, stalled, or could not record it; publishing again"
)

// row is a claimed outbox row.
type row struct {
	attempt     int
	bucket      int32     // its partition's
	ctid        string    // where its batch transaction locked it
	created     time.Time // created_at: when its transaction began
	eventType   string
	id          uuid.UUID
	idText      string // id, as text: the message's UUID
	metadata    map[string]string
	orderingKey string
	payload     []byte
	seq         int64
	topic       string
}

// outcome is what became of a claimed row.
type outcome struct {
	delay  time.Duration
	err    string
	id     uuid.UUID
	refund bool
	status pgbox.OutboxStatus
}

// runBatch claims rows in a batch transaction, records the claim, publishes
// the rows topic by topic in commit order, and records the outcomes in the
// same transaction. It returns how many rows the claim took. While the
// broker is unreachable, or in doubt, it first waits for its turn to probe
// it (outage).
//
// The claim record is sent before the rows are published and its answer
// read after: once sent, the server runs and commits it whatever becomes
// of the relay, so a relay killed while it publishes still leaves its
// attempt to be counted, and the batch does not wait a round trip for it.
// After a record fails, the next batch waits for its record's answer
// before it publishes, until one succeeds.
func (r *Relay) runBatch() (int, error) {
	epoch, ok := r.outage.await(r.loop.StopSignal())
	if !ok {
		return 0, nil
	}
	claimed := time.Now() // before the claim: the transaction ends within a lease of it
	b, err := r.claim()
	if err != nil || len(b.rows) == 0 {
		r.outage.idle(epoch)
		return 0, err
	}
	defer b.rollback()
	if b.stale {
		// Lost attempts are still to be counted, and their rows may be in
		// this batch: count them first, and claim again.
		b.rollback()
		r.reconcile()
		r.outage.idle(epoch)
		return len(b.rows), nil
	}
	// Held before its record exists, so that no other worker of this
	// process, reading the list later, can see the record without it.
	r.held.Add(b.xid)
	defer r.held.Drop(b.xid) // committed, or taken back, by then
	rec, err := r.sendClaimRecord(b)
	if err != nil {
		r.outage.idle(epoch)
		return 0, err
	}
	defer rec.answer() // read on every path, its connection given back
	if r.recordFirst.Load() {
		if err := r.recorded(rec); err != nil {
			r.outage.idle(epoch)
			return len(b.rows), err
		}
	}
	rd := &round{
		conn:     b.conn,
		epoch:    epoch,
		deadline: claimed.Add(r.cfg.Lease * 3 / 4),
		held:     map[string]bool{},
		outcomes: make([]outcome, 0, len(b.rows)),
	}
	for _, group := range byTopic(b.rows) {
		r.publishGroup(rd, group)
	}
	outcomes, charge := r.settle(rd)
	if rd.txLost {
		// Nothing of it can be recorded (see complete): end it now rather
		// than try.
		b.rollback()
	}
	// A record that failed leaves the outcomes to be recorded all the
	// same: the batch transaction's row locks fence them (completeSQL).
	recErr := r.recorded(rec)
	if r.complete(b, outcomes) {
		r.loop.Progress(finished(outcomes))
	}
	if len(charge) > 0 {
		r.charge(charge)
	}
	if created, ok := firstKeyed(b.rows); ok { // their keys' next rows may be behind the frontier
		r.frontier.Rewind(created)
	}
	return len(b.rows), recErr
}

// batch is what one claim took, and the connection whose transaction
// holds it.
type batch struct {
	conn *pgxpool.Conn // in the batch transaction; nil once it has ended
	xid  string        // the transaction's id
	rows []*row
	// statementTimeout is the session's statement_timeout, restored by
	// the completion (completePlanning).
	statementTimeout string
	stale            bool // lost attempts wait to be counted (staleClaimsSQL)
}

// rollback ends b's transaction, if it is still open, without writing,
// and gives its connection back to the pool (which closes a connection
// left in a transaction, one the rollback could not reach).
func (b *batch) rollback() {
	if b.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), bookkeepingTimeout)
	defer cancel()
	_, _ = b.conn.Exec(ctx, "ROLLBACK")
	b.release()
}

// release gives b's connection back to the pool, its transaction over.
func (b *batch) release() {
	b.conn.Release()
	b.conn = nil
}

// finished counts the outcomes that finish their row's attempt: all but
// the rows handed back.
func finished(outcomes []outcome) int {
	n := 0
	for _, o := range outcomes {
		if !o.refund {
			n++
		}
	}
	return n
}

// firstKeyed returns the earliest created_at among the rows that have an
// ordering key, and whether there is one.
func firstKeyed(rows []*row) (created time.Time, ok bool) {
	for _, rw := range rows {
		if rw.orderingKey != "" && (!ok || rw.created.Before(created)) {
			created, ok = rw.created, true
		}
	}
	return created, ok
}

// round is what the publishing of one claimed batch has learnt so far.
type round struct {
	// deadline is when the round's publishing must be over, three quarters
	// into the lease, so that the outcomes are recorded before the lease
	// lets another relay publish the rows again: no call starts unless its
	// PublishTimeout ends by then.
	deadline time.Time
	conn     *pgxpool.Conn   // in the batch transaction: a TxPublisher's
	txLost   bool            // a TxPublisher's statement left the batch transaction unusable: publish no more
	epoch    int             // the outage tracker's, when the round began
	down     error           // a publish found the broker unreachable: publish no more
	held     map[string]bool // ordering keys with a row not published this round
	outcomes []outcome
	reached  bool  // the broker answered a publish: took it, or refused it
	stuck    error // a call was not made: an earlier one to its topic still hangs
	// unsure are the rows whose call hung or failed unreachable: handed
	// back uncharged at the end, and charged only if the broker then
	// proves reachable (see outage).
	unsure []doubt
}

// released hands rows back unpublished: pending at once, their attempt
// refunded.
func (rd *round) released(rows ...*row) { rd.releasedFor(0, rows...) }

// releasedFor hands rows back unpublished, their attempt refunded, to be
// published again after delay.
func (rd *round) releasedFor(delay time.Duration, rows ...*row) {
	for _, rw := range rows {
		rd.hold(rw)
		rd.outcomes = append(rd.outcomes, outcome{delay: delay, id: rw.id, status: pgbox.OutboxPending, refund: true})
	}
}

// hold keeps the rest of the round from publishing a later row of rw's key.
func (rd *round) hold(rw *row) {
	if rw.orderingKey != "" {
		rd.held[rw.orderingKey] = true
	}
}

// publishGroup publishes one topic's rows, in commit order, and notes each
// row's outcome in rd.
//
// Each row is published in a call of its own. Watermill's Publish returns
// one error for all of a call's messages, and the publishers that send
// message by message (NATS JetStream, RabbitMQ, Kafka, GoChannel) stop at
// the first failure with the earlier messages already sent: after a failed
// call of several messages nobody knows which went out. One row per call,
// every row's outcome is its own: a row that went out is recorded
// published, never sent again because a neighbour failed, and only the row
// that failed is charged. Config.AtomicPublisher declares a publisher that
// takes a call's messages all or none (watermill-sql's one INSERT): the
// group then goes in one call, and only a call refused for a reason of the
// messages' own is made again row by row, so that the row the broker
// refuses fails alone. A ResultPublisher, which reports each message's
// result, gets the group in one call instead (publishResults); a
// TxPublisher's statement runs in the batch transaction (publishInTx).
//
// Per-key order: the claim takes only the head of each key, so a batch
// holds at most one row per key. Should it hold more, a row whose key has
// an earlier row not published this round is handed back unpublished,
// never sent after it.
func (r *Relay) publishGroup(rd *round, group []*row) {
	if tp, ok := r.cfg.Publisher.(TxPublisher); ok {
		r.publishInTx(rd, tp, group)
		return
	}
	if rp, ok := r.cfg.Publisher.(ResultPublisher); ok {
		r.publishResults(rd, rp, group)
		return
	}
	if r.cfg.AtomicPublisher && len(group) > 1 && r.canStart(rd) {
		msgs, send := r.publish(group)
		err := r.callOnce(group, msgs, send, nil)
		if r.classify(err) != refused {
			r.note(rd, group, err)
			return
		}
		// Refused, so none went out: find the row to blame, one per call.
		rd.reached = true
	}
	r.publishEach(rd, group)
}

// publishEach publishes group's rows one per call, the calls one after
// another on a goroutine of their own (calls.run), and notes each row's
// outcome in rd.
func (r *Relay) publishEach(rd *round, group []*row) {
	for len(group) > 0 {
		next := 0 // the row being published: read here once run has returned
		err := r.calls.run(group[0].topic, r.loop.WorkContext().Done(), func(call caller) {
			for ; next < len(group); next++ {
				rw := group[next]
				if !r.canStart(rd) {
					rd.released(group[next:]...)
					next = len(group)
					return
				}
				if rd.held[rw.orderingKey] {
					rd.released(rw)
					continue
				}
				rows := group[next : next+1]
				msgs, send := r.publish(rows)
				err := r.send(call, rows, msgs, send, nil)
				if errors.Is(err, errAbandoned) {
					return // the worker has noted it, and goes on
				}
				r.note(rd, rows, err)
			}
		})
		if err == nil {
			return
		}
		// Given up on group[next]'s call: the rest carry on without it.
		r.note(rd, group[next:next+1], err)
		group = group[next+1:]
	}
}

// publish returns the call that publishes rows to their topic through
// Config.Publisher, and their messages.
func (r *Relay) publish(rows []*row) (msgs []*message.Message, send func() error) {
	msgs = toMessages(rows)
	return msgs, func() error { return r.cfg.Publisher.Publish(rows[0].topic, msgs...) }
}

// canStart reports whether the round may start another publish: the broker
// is not down, Stop has not given up waiting, and the call would end by
// the round's deadline.
func (r *Relay) canStart(rd *round) bool {
	return rd.down == nil && !r.loop.CancelledByStop() && time.Until(rd.deadline) >= r.cfg.PublishTimeout
}

// callOnce makes one call that publishes rows, msgs, through send, as a
// run of its own (see send), and returns its error.
func (r *Relay) callOnce(rows []*row, msgs []*message.Message, send func() error, each func(i int) error) error {
	var err error
	if gaveUp := r.calls.run(rows[0].topic, r.loop.WorkContext().Done(), func(call caller) {
		err = r.send(call, rows, msgs, send, each)
	}); gaveUp != nil {
		return gaveUp
	}
	return err
}

// send makes a call, through call, that publishes rows, msgs, through
// send, with a span per message, and returns its error; while an earlier
// call to the rows' topic hangs, it makes none and returns a *stuckError.
// each, if not nil, gives each message's own error once send has returned
// nil.
func (r *Relay) send(call caller, rows []*row, msgs []*message.Message, send func() error, each func(i int) error) error {
	topic := rows[0].topic
	if err := r.calls.stuck(topic); err != nil {
		return err
	}
	end := r.tel.Publishing(topic, msgs)
	err := call(len(msgs), end, send)
	if errors.Is(err, errAbandoned) {
		return err // its spans are ended
	}
	if err != nil || each == nil {
		each = func(int) error { return err }
	}
	end(each)
	return err
}

// verdict is what a call's error says of its messages.
type verdict int

const (
	published   verdict = iota // the publisher took them
	hung                       // no answer within PublishTimeout
	stuck                      // not sent: an earlier call to the topic still hangs
	stopping                   // Stop's deadline ended the wait
	unreachable                // the broker could not be reached (Config.UnreachableFunc)
	refused                    // the broker refused them
)

// classify returns the verdict on a call's error.
func (r *Relay) classify(err error) verdict {
	var (
		hungErr  *hungError
		stuckErr *stuckError
	)
	switch {
	case err == nil:
		return published
	case errors.As(err, &hungErr):
		return hung
	case errors.As(err, &stuckErr):
		return stuck
	case errors.Is(err, errStopping):
		return stopping
	case r.cfg.UnreachableFunc(err):
		return unreachable
	default:
		return refused
	}
}

// note records in rd what err, the error of the call that published rows,
// means for them.
func (r *Relay) note(rd *round, rows []*row, err error) {
	switch r.classify(err) {
	case published:
		rd.reached = true
		for _, rw := range rows {
			rd.outcomes = append(rd.outcomes, outcome{id: rw.id, status: pgbox.OutboxPublished})
		}
	case unreachable:
		rd.down = err
		fallthrough
	case hung:
		// Not the rows' fault if the broker has gone: decided once the
		// round is over (settle).
		for _, rw := range rows {
			rd.hold(rw)
			rd.unsure = append(rd.unsure, doubt{err: err, row: rw})
		}
	case stuck:
		// Not sent, so not charged: tried again after a while, when the
		// hung call may have returned.
		rd.stuck = err
		rd.releasedFor(r.cfg.PublishTimeout, rows...)
	case stopping:
		rd.released(rows...)
	case refused:
		rd.reached = true
		for _, rw := range rows {
			rd.hold(rw)
			rd.outcomes = append(rd.outcomes, r.failed(rw, err))
		}
	}
}

// settle ends a round: it hands back the rows whose call hung or failed
// unreachable, uncharged, tells the outage tracker how the broker fared,
// and returns every row's outcome, and the rows of an earlier round in
// doubt that this round's verdict charges. A round in which every call
// failed unreachable or hung is an outage. A round that reached the broker
// and then had calls fail so is in doubt: a probe decides whether the
// broker went away (its rows stay uncharged) or the rows' own publish
// failed (charged then). A round whose only news is a topic still hanging
// fails a probe; a round that made no call tells nothing of the broker.
func (r *Relay) settle(rd *round) (outcomes []outcome, charge []doubt) {
	down := rd.down
	for _, u := range rd.unsure {
		rd.released(u.row)
		down = cmp.Or(down, u.err)
	}
	switch {
	case rd.reached && down != nil:
		charge = r.outage.mixed(rd.epoch, down, rd.unsure)
	case rd.reached:
		charge = r.outage.reached(rd.epoch)
	case down != nil:
		r.outage.failed(rd.epoch, down)
	case rd.stuck != nil:
		r.outage.hanging(rd.epoch, rd.stuck)
	default:
		r.outage.idle(rd.epoch)
	}
	return rd.outcomes, charge
}

// charge records the failures of rows handed back uncharged from a round
// in doubt, now that the broker has proved reachable: each is charged an
// attempt, as any failed publish, unless it has been claimed again since
// (chargeSQL's fence). A charge that cannot be recorded is logged and
// dropped: the row stays uncharged, the safe side of an outage.
func (r *Relay) charge(doubts []doubt) {
	outcomes := make([]outcome, len(doubts))
	claimed := make(map[uuid.UUID]*row, len(doubts))
	for i, d := range doubts {
		outcomes[i] = r.failed(d.row, d.err)
		claimed[d.row.id] = d.row // its attempts as the hand-back left them
	}
	a := newChargeArgs(outcomes, func(id uuid.UUID) *row { return claimed[id] })
	ctx, cancel := context.WithTimeout(context.Background(), bookkeepingTimeout)
	defer cancel()
	n, dead, err := scanRecorded(r.pool.QueryRow(ctx, r.q.charge, a.ids, a.statuses, a.delays, a.attempts, a.errs, a.buckets))
	if err != nil {
		r.cfg.Logger.Warn("relay: could not charge the rows of a failed publish their attempt; they stay uncharged",
			slog.Int("rows", len(doubts)), slog.String("error", err.Error()))
		return
	}
	r.deadRows(dead)
	r.loop.Progress(n)
}

// claim begins a batch transaction and takes a batch of rows in it, in one
// round trip. With no rows, the transaction is over.
func (r *Relay) claim() (*batch, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bookkeepingTimeout)
	defer cancel()
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return &batch{}, fmt.Errorf("claim: %w", err)
	}
	b := &batch{conn: conn}
	from := r.frontier.Next(time.Now())
	if err := r.readClaim(ctx, b, from); err != nil {
		b.rollback()
		return &batch{}, err
	}
	if len(b.rows) == 0 {
		b.rollback()
		if b.stale {
			r.reconcile()
		}
	}
	return b, nil
}

// readClaim begins b's transaction, runs the claim in it and reads its
// rows into b, and whether lost attempts wait to be counted.
func (r *Relay) readClaim(ctx context.Context, b *batch, from *time.Time) (err error) {
	var q pgx.Batch
	q.Queue("BEGIN")
	q.Queue(r.q.openSince)
	q.Queue(r.q.claim, r.cfg.BatchSize, from)
	q.Queue(r.q.staleClaims, r.held.List())
	_, inTx := r.cfg.Publisher.(TxPublisher)
	if inTx {
		q.Queue(publishTimeoutSQL, fmt.Sprint(max(1, r.cfg.PublishTimeout.Milliseconds())))
		q.Queue("SAVEPOINT " + publishSavepoint) // the first statement's (execPublish)
	}
	results := b.conn.SendBatch(ctx, &q)
	defer func() {
		if cerr := results.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("claim: %w", cerr)
		}
	}()
	if _, err := results.Exec(); err != nil {
		return fmt.Errorf("claim: begin: %w", err)
	}
	var (
		openSince *time.Time
		timeout   string
	)
	if err := results.QueryRow().Scan(&openSince, &timeout, &b.statementTimeout); err != nil {
		return fmt.Errorf("claim: look for open transactions: %w", err)
	}
	if err := r.readRows(b, results, from, openSince); err != nil {
		return err
	}
	var xid *string
	if err := results.QueryRow().Scan(&xid, &b.stale); err != nil {
		return fmt.Errorf("claim: look for lost attempts: %w", err)
	}
	if len(b.rows) > 0 && xid == nil {
		return fmt.Errorf("claim: the batch transaction has no id, having locked %d rows", len(b.rows))
	}
	if xid != nil {
		b.xid = *xid
	}
	if inTx {
		for range 2 {
			if _, err := results.Exec(); err != nil {
				return fmt.Errorf("claim: bound the publish's statements and make its savepoint: %w", err)
			}
		}
	}
	return nil
}

// readRows reads the claim's rows into b, and moves the frontier on past
// them, as far as the oldest transaction open as the claim began allows
// (openSince).
func (r *Relay) readRows(b *batch, results pgx.BatchResults, from, openSince *time.Time) error {
	rows, err := results.Query()
	if err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	var oldest *time.Time // of the rows taken
	for rows.Next() {
		var (
			rw        row
			metadata  []byte
			available time.Time
		)
		if err := rows.Scan(&rw.ctid, &rw.bucket, &rw.id, &rw.topic, &rw.eventType, &rw.orderingKey, &rw.payload, &metadata,
			&rw.attempt, &rw.seq, &rw.created, &available); err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		if oldest == nil || available.Before(*oldest) {
			oldest = &available
		}
		rw.idText = rw.id.String()
		if string(metadata) != "{}" { // the outbox's default: nothing to decode
			if err := json.Unmarshal(metadata, &rw.metadata); err != nil {
				// Written behind the outbox's back: publish without it
				// rather than hold the row (and its key) for ever.
				r.cfg.Logger.Error("relay: outbox row metadata is not a JSON object of strings; publishing without it",
					slog.String("id", rw.idText), slog.String("error", err.Error()))
				rw.metadata = nil
			}
		}
		b.rows = append(b.rows, &rw)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	r.frontier.Took(from, oldest, openSince)
	return nil
}

// claimRecord is a batch's claim record (recordClaimSQL), sent from a
// session of the records pool, and its answer once read.
type claimRecord struct {
	conn    *pgxpool.Conn // nil once the answer is read
	results pgx.BatchResults
	cancel  context.CancelFunc
	err     error
}

// sendClaimRecord sends b's claim record and returns without waiting for
// its answer (claimRecord.answer), or returns an error if the record was
// not sent whole: then b is not to be published.
func (r *Relay) sendClaimRecord(b *batch) (*claimRecord, error) {
	// The answer is read once the rows are published: a lease at most.
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Lease+bookkeepingTimeout)
	conn, err := r.records.Acquire(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("claim: record it: %w", err)
	}
	ids := make([]string, len(b.rows))
	for i, rw := range b.rows {
		ids[i] = rw.idText
	}
	var q pgx.Batch
	q.Queue(r.q.recordClaim, b.xid, ids)
	rec := &claimRecord{conn: conn, results: conn.SendBatch(ctx, &q), cancel: cancel}
	// Sent whole, it leaves its connection busy until its answer is read.
	// Otherwise (a failed prepare, a failed write) its answer, an error, is
	// already there.
	if !conn.Conn().PgConn().IsBusy() {
		if err := rec.answer(); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// answer reads the record's answer, once, gives its connection back, and
// returns its error.
func (c *claimRecord) answer() error {
	if c.conn == nil {
		return c.err
	}
	_, err := c.results.Exec()
	if cerr := c.results.Close(); err == nil {
		err = cerr
	}
	c.conn.Release()
	c.conn = nil
	c.cancel()
	if err != nil {
		c.err = fmt.Errorf("claim: record it: %w", err)
	}
	return c.err
}

// recorded reads rec's answer and returns its error. While records fail,
// each batch waits for its record's answer before it publishes (runBatch).
func (r *Relay) recorded(rec *claimRecord) error {
	err := rec.answer()
	r.recordFirst.Store(err != nil)
	return err
}

// reconcile counts the lost attempts (see reconcileSQL), but for the
// batches this process holds (see claimrec.Held). If it fails, the next
// claim tries again: until then no batch is published.
func (r *Relay) reconcile() {
	ctx, cancel := context.WithTimeout(context.Background(), bookkeepingTimeout)
	defer cancel()
	rows, err := r.pool.Query(ctx, r.q.reconcile, r.held.List(), lostBatchError, r.cfg.MaxAttempts, leaseExpiredError)
	if err != nil {
		r.cfg.Logger.Error("relay: could not count the attempts of a lost batch; will try again", slog.String("error", err.Error()))
		return
	}
	defer rows.Close()
	type lost struct {
		id       uuid.UUID
		topic    string
		attempts int
		status   pgbox.OutboxStatus
	}
	var dead []lost
	for rows.Next() {
		var l lost
		if err := rows.Scan(&l.id, &l.topic, &l.attempts, &l.status); err != nil {
			break
		}
		if l.status == pgbox.OutboxDead {
			dead = append(dead, l)
		}
	}
	if err := rows.Err(); err != nil { // the commit's error included
		r.cfg.Logger.Error("relay: could not count the attempts of a lost batch; will try again", slog.String("error", err.Error()))
		return
	}
	for _, l := range dead {
		r.tel.Dead(l.topic)
		r.cfg.Logger.Error("relay: outbox row is dead: its publish attempts ran out (the last one never finished)",
			slog.String("id", l.id.String()), slog.String("topic", l.topic), slog.Int("attempts", l.attempts))
	}
}

// byTopic groups rows by topic, each group and the groups in commit order.
func byTopic(rows []*row) [][]*row {
	slices.SortFunc(rows, func(a, b *row) int { return cmp.Compare(a.seq, b.seq) })
	index := map[string]int{}
	var groups [][]*row
	for _, rw := range rows {
		i, ok := index[rw.topic]
		if !ok {
			i = len(groups)
			index[rw.topic] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], rw)
	}
	return groups
}

// toMessages turns rows into Watermill messages whose UUID is the row id,
// the same on every attempt, so consumers dedupe a republished message.
func toMessages(rows []*row) []*message.Message {
	msgs := make([]*message.Message, len(rows))
	for i, rw := range rows {
		m := message.NewMessage(rw.idText, rw.payload)
		for k, v := range rw.metadata {
			m.Metadata.Set(k, v)
		}
		m.Metadata.Set(pgbox.MetadataEventType, rw.eventType)
		if rw.orderingKey != "" {
			m.Metadata.Set(pgbox.MetadataOrderingKey, rw.orderingKey)
		}
		msgs[i] = m
	}
	return msgs
}

func (r *Relay) failed(rw *row, err error) outcome {
	o := outcome{id: rw.id, err: pgtext.Clean("publish: "+err.Error(), maxErrorBytes)}
	if r.cfg.MaxAttempts > 0 && rw.attempt >= r.cfg.MaxAttempts {
		o.status = pgbox.OutboxDead
		r.cfg.Logger.Error("relay: outbox row is dead: its publish attempts ran out",
			slog.String("id", rw.id.String()), slog.String("topic", rw.topic), slog.Int("attempts", rw.attempt), slog.String("error", o.err))
		return o
	}
	o.status = pgbox.OutboxPending
	o.delay = max(r.cfg.RetryBackoffFunc(rw.attempt), 0)
	r.cfg.Logger.Warn("relay: publish failed; will retry",
		slog.String("id", rw.id.String()), slog.String("topic", rw.topic), slog.Int("attempt", rw.attempt),
		slog.Duration("retry_in", o.delay), slog.String("error", o.err))
	return o
}

// chargeArgs are failed outcomes as the parameters of chargeSQL. Ids go
// as text (the statement casts them to uuid[]) and statuses as plain
// strings: pgx encodes a []uuid.UUID, or a slice of a named string type,
// only when it knows the parameter's type, which the exec and
// simple_protocol query modes never tell it.
type chargeArgs struct {
	ids, statuses []string
	delays        []int64
	errs          []*string
	// Each row's partition and its attempts as the hand-back left them:
	// its fence.
	buckets, attempts []int32
}

// newChargeArgs returns outcomes as parameters; claimed gives each row as
// it was handed back.
func newChargeArgs(outcomes []outcome, claimed func(uuid.UUID) *row) chargeArgs {
	n := len(outcomes)
	a := chargeArgs{ids: make([]string, n), statuses: make([]string, n), delays: make([]int64, n),
		errs: make([]*string, n), buckets: make([]int32, n), attempts: make([]int32, n)}
	for i, o := range outcomes {
		rw := claimed(o.id)
		a.ids[i], a.statuses[i], a.delays[i] = rw.idText, string(o.status), o.delay.Milliseconds()
		a.buckets[i], a.attempts[i] = rw.bucket, int32(rw.attempt-1)
		if o.err != "" {
			a.errs[i] = &outcomes[i].err
		}
	}
	return a
}

// completionArgs are a batch's outcomes as the parameters of completeSQL:
// every row, by seq, with where the claim found it and its attempts as
// claimed (its fence); and the outcomes other than published, by seq.
type completionArgs struct {
	seqs     []int64
	ctids    []string
	attempts []int32
	// The ranges of the rows' buckets (see bucketRanges).
	datedLo, datedHi, undatedLo, undatedHi int32
	// The exceptions.
	xSeqs     []int64
	xStatuses []string
	xDelays   []int64
	xRefunds  []int32
	xErrs     []*string
}

// newCompletionArgs returns outcomes as parameters; claimed gives each
// row as it was claimed.
func newCompletionArgs(outcomes []outcome, claimed func(uuid.UUID) *row) completionArgs {
	n := len(outcomes)
	a := completionArgs{seqs: make([]int64, n), ctids: make([]string, n), attempts: make([]int32, n)}
	buckets := make([]int32, n)
	for i, o := range outcomes {
		rw := claimed(o.id)
		a.seqs[i], a.ctids[i], a.attempts[i], buckets[i] = rw.seq, rw.ctid, int32(rw.attempt-1), rw.bucket
		if o.status == pgbox.OutboxPublished && !o.refund && o.err == "" {
			continue
		}
		a.xSeqs, a.xStatuses, a.xDelays = append(a.xSeqs, rw.seq), append(a.xStatuses, string(o.status)), append(a.xDelays, o.delay.Milliseconds())
		a.xRefunds, a.xErrs = append(a.xRefunds, 0), append(a.xErrs, nil)
		if o.refund {
			a.xRefunds[len(a.xRefunds)-1] = 1
		}
		if o.err != "" {
			a.xErrs[len(a.xErrs)-1] = &outcomes[i].err
		}
	}
	a.datedLo, a.datedHi, a.undatedLo, a.undatedHi = bucketRanges(buckets)
	return a
}

// complete records outcomes in b's transaction and commits it, and reports
// whether it did. A row handed back is written too: pending from now, it
// goes behind the rows that wait, so that a row whose publish failed
// unreachable is not the first of the next round, the probe of the broker
// (see outage). While the outcomes cannot be recorded (the database is down,
// or rejects the update), it retries, and the relay claims nothing more
// (workloop.Record): rows published again and again while their outcomes
// go nowhere would flood the consumers. It retries in the batch
// transaction, which keeps the rows locked, while that lives (up to a
// lease of retrying: the server then ends it as idle), and in a
// transaction of its own after (completeSQL's fences keep a retry from
// recording anything twice, or over another relay's). Only Stop's
// deadline makes it give up; the batch is then lost, its rows published
// again, which consumers dedupe, and its attempt counted by the relay
// that reconciles it. A TxPublisher's messages end with the batch
// transaction: once it is cut, nothing of the batch is recorded, and it
// is lost the same way.
func (r *Relay) complete(b *batch, outcomes []outcome) bool {
	claimed := make(map[uuid.UUID]*row, len(b.rows))
	for _, rw := range b.rows {
		claimed[rw.id] = rw
	}
	a := newCompletionArgs(outcomes, func(id uuid.UUID) *row { return claimed[id] })
	var recorded int
	_, inTx := r.cfg.Publisher.(TxPublisher)
	lost := false
	err := r.loop.Record("publish outcomes", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), bookkeepingTimeout)
		defer cancel()
		var q pgx.Batch
		if b.conn == nil && inTx {
			// The messages were written in the batch transaction, and went
			// with it: nothing was published. Let go of the batch before
			// claiming resumes, so that the next claim finds its attempt
			// lost and counts it (reconcile) before the rows are
			// published again.
			r.held.Drop(b.xid)
			lost = true
			return nil
		}
		if b.conn == nil { // the batch transaction was cut: a transaction of its own
			conn, err := r.pool.Acquire(ctx)
			if err != nil {
				return err
			}
			b.conn = conn
			for _, begin := range r.q.begin {
				q.Queue(begin)
			}
		}
		q.Queue(completePlanning, b.statementTimeout)
		q.Queue("SAVEPOINT complete")
		q.Queue(r.q.complete, b.xid, a.seqs, a.ctids, a.attempts, a.datedLo, a.datedHi, a.undatedLo, a.undatedHi,
			a.xSeqs, a.xStatuses, a.xDelays, a.xRefunds, a.xErrs)
		q.Queue("COMMIT")
		n, dead, err := sendCompletion(ctx, b.conn, &q)
		if err != nil {
			// The statement's work is undone and the transaction kept,
			// with its rows locked, for the next try: were it rolled back,
			// another worker's claim could take the published rows and
			// publish them again. One that the failure ended (a cut
			// connection, a failed commit) is let go, and the next try
			// begins another.
			if b.conn.Conn().PgConn().TxStatus() == 'I' {
				b.release()
			} else if _, err := b.conn.Exec(ctx, "ROLLBACK TO SAVEPOINT complete"); err != nil {
				b.rollback()
			}
			return err
		}
		b.release()
		recorded = n
		r.deadRows(dead)
		return nil
	})
	if lost {
		r.cfg.Logger.Warn("relay: the batch transaction was cut before its commit was confirmed; if it did not commit, the messages written in it went with it, and its rows are published again, this attempt counted",
			slog.Int("rows", len(outcomes)))
		return false
	}
	if err == nil && recorded < len(outcomes) {
		r.cfg.Logger.Warn("relay: some outcomes were not recorded because another relay had counted the batch as lost (its transaction was cut before it committed)",
			slog.Int("rows", len(outcomes)), slog.Int("recorded", recorded))
	}
	return err == nil
}

// bucketRanges returns the range of the dated buckets (above 0) among
// buckets, and the range of the undated ones (0); an empty range (1 to 0)
// for either when there are none.
func bucketRanges(buckets []int32) (datedLo, datedHi, undatedLo, undatedHi int32) {
	datedLo, datedHi, undatedLo, undatedHi = 1, 0, 1, 0
	for _, b := range buckets {
		switch {
		case b <= 0:
			undatedLo, undatedHi = 0, 0
		case datedHi == 0:
			datedLo, datedHi = b, b
		default:
			datedLo, datedHi = min(datedLo, b), max(datedHi, b)
		}
	}
	return datedLo, datedHi, undatedLo, undatedHi
}

// scanRecorded reads what completeSQL or chargeSQL returns (see
// recordedSQL): how many rows it recorded, and the topics of those it
// recorded dead; a row its fences leave alone is not recorded. Run on a
// pool, the error includes the commit's.
func scanRecorded(row pgx.Row) (recorded int, dead []string, _ error) {
	if err := row.Scan(&recorded, &dead); err != nil {
		return 0, nil, err
	}
	return recorded, dead, nil
}

// sendCompletion sends q (begin, if the batch transaction was cut;
// completePlanning's settings, a savepoint, completeSQL, COMMIT) on conn,
// in one round trip, and returns what scanRecorded does. The commit is
// the batch's end: if completeSQL fails, the server skips it, and the
// transaction is left open, failed, for the caller to roll back to the
// savepoint.
func sendCompletion(ctx context.Context, conn *pgxpool.Conn, q *pgx.Batch) (recorded int, dead []string, err error) {
	results := conn.SendBatch(ctx, q)
	defer func() {
		if cerr := results.Close(); err == nil {
			err = cerr
		}
	}()
	for range len(q.QueuedQueries) - 2 { // all but completeSQL and COMMIT
		if _, err := results.Exec(); err != nil {
			return 0, nil, err
		}
	}
	if recorded, dead, err = scanRecorded(results.QueryRow()); err != nil {
		return 0, nil, err
	}
	tag, err := results.Exec()
	if err == nil && tag.String() != "COMMIT" {
		err = fmt.Errorf("the batch transaction ended in %s, not COMMIT", tag)
	}
	if err != nil {
		return 0, nil, err
	}
	return recorded, dead, nil
}

// deadRows counts rows recorded dead, by topic, once their record has
// committed.
func (r *Relay) deadRows(topics []string) {
	for _, topic := range topics {
		r.tel.Dead(topic)
	}
}
