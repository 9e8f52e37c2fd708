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

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/partition"
	"github.com/pgbox/pgbox/internal/pgtext"
)

const (
	// bookkeepingTimeout bounds the relay's own statements. They run on a
	// context Stop does not cancel, so outcomes are recorded while stopping.
	bookkeepingTimeout = 30 * time.Second
	// maxErrorBytes bounds a recorded publish error.
	maxErrorBytes = 8 << 10
	// leaseExpiredError is recorded for an attempt whose relay never
	// reported back before its lease ran out.
	leaseExpiredError = "lease expired before the publish was recorded: the relay crashed, stalled, or could not record it; publishing again"
)

// row is a claimed outbox row.
type row struct {
	attempt     int
	created     time.Time // created_at: when its transaction began
	eventType   string
	id          uuid.UUID
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

// runBatch claims rows, publishes them topic by topic in commit order, and
// records the outcomes. It returns how many rows the claim took. While the
// broker is unreachable, or in doubt, it first waits for its turn to probe
// it (outage).
func (r *Relay) runBatch() (int, error) {
	epoch, ok := r.outage.await(r.loop.StopSignal())
	if !ok {
		return 0, nil
	}
	claimed := time.Now() // before the claim: its lease ends after claimed+Lease
	token := r.proc.Token()
	rows, n, err := r.claim(token)
	if err != nil || len(rows) == 0 {
		r.outage.idle(epoch)
		return n, err
	}
	rd := &round{
		epoch:    epoch,
		deadline: claimed.Add(r.cfg.Lease * 3 / 4),
		held:     map[string]bool{},
		outcomes: make([]outcome, 0, len(rows)),
	}
	for _, group := range byTopic(rows) {
		r.publishGroup(rd, group)
	}
	outcomes, charge := r.settle(rd)
	if r.complete(token, outcomes) {
		r.loop.Progress(finished(outcomes))
	}
	if len(charge) > 0 {
		r.charge(charge)
	}
	if created, ok := firstKeyed(rows); ok { // their keys' next rows may be behind the frontier
		r.frontier.Rewind(created)
	}
	return n, nil
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
// result, gets the group in one call instead (publishResults).
//
// Per-key order: the claim takes only the head of each key, so a batch
// holds at most one row per key. Should it hold more, a row whose key has
// an earlier row not published this round is handed back unpublished,
// never sent after it.
func (r *Relay) publishGroup(rd *round, group []*row) {
	if rp, ok := r.cfg.Publisher.(ResultPublisher); ok {
		r.publishResults(rd, rp, group)
		return
	}
	if r.cfg.AtomicPublisher && len(group) > 1 && r.canStart(rd) {
		err := r.send(group[0].topic, group)
		if r.classify(err) != refused {
			r.note(rd, group, err)
			return
		}
		// Refused, so none went out: find the row to blame, one per call.
		rd.reached = true
	}
	for i, rw := range group {
		if !r.canStart(rd) {
			rd.released(group[i:]...)
			return
		}
		if rd.held[rw.orderingKey] {
			rd.released(rw)
			continue
		}
		r.note(rd, group[i:i+1], r.send(rw.topic, group[i:i+1]))
	}
}

// canStart reports whether the round may start another publish: the broker
// is not down, Stop has not given up waiting, and the call would end by
// the round's deadline.
func (r *Relay) canStart(rd *round) bool {
	return rd.down == nil && !r.loop.CancelledByStop() && time.Until(rd.deadline) >= r.cfg.PublishTimeout
}

// send publishes rows to topic in one Publish call, with a span per
// message; while an earlier call to topic hangs, it makes none and returns
// a *stuckError.
func (r *Relay) send(topic string, rows []*row) error {
	if err := r.calls.stuck(topic); err != nil {
		return err
	}
	msgs := toMessages(rows)
	return r.call(topic, msgs, func() error { return r.cfg.Publisher.Publish(topic, msgs...) }, nil)
}

// call makes send, a call that publishes msgs to topic, with a span per
// message, waits for it (calls.publish) and returns its error. each, if not
// nil, gives each message's own error once send has returned nil.
func (r *Relay) call(topic string, msgs []*message.Message, send func() error, each func(i int) error) error {
	end := r.tel.Publishing(topic, msgs)
	err := r.calls.publish(topic, msgs, send, r.loop.WorkContext().Done())
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
	attempts := make([]int32, len(doubts))
	for i, d := range doubts {
		outcomes[i] = r.failed(d.row, d.err)
		attempts[i] = int32(d.row.attempt - 1) // as the refund left it
	}
	a := newOutcomeArgs(outcomes)
	ctx, cancel := context.WithTimeout(context.Background(), bookkeepingTimeout)
	defer cancel()
	n, err := r.recordOutcomes(ctx, r.q.charge, a.ids, a.statuses, a.delays, attempts, a.errs, a.days)
	if err != nil {
		r.cfg.Logger.Warn("relay: could not charge the rows of a failed publish their attempt; they stay uncharged",
			slog.Int("rows", len(doubts)), slog.String("error", err.Error()))
		return
	}
	r.loop.Progress(n)
}

// claim takes a batch of rows. It returns the rows to publish and how many
// rows the claim took; they differ by the rows it marked dead.
func (r *Relay) claim(token int64) ([]*row, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bookkeepingTimeout)
	defer cancel()
	from := r.frontier.Next(time.Now())
	rows, err := r.pool.Query(ctx, r.q.claim, r.cfg.BatchSize, token, r.cfg.Lease.Milliseconds(), leaseExpiredError, r.cfg.MaxAttempts, from)
	if err != nil {
		return nil, 0, fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	var (
		out, dead []*row
		n         int
		oldest    *time.Time // of the fresh rows taken
	)
	for rows.Next() {
		n++
		var (
			rw       row
			status   pgbox.OutboxStatus
			metadata []byte
		)
		if err := rows.Scan(&rw.id, &status, &rw.topic, &rw.eventType, &rw.orderingKey, &rw.payload, &metadata, &rw.attempt, &rw.seq, &rw.created, &oldest); err != nil {
			return nil, 0, fmt.Errorf("claim: %w", err)
		}
		if status == pgbox.OutboxDead { // its lease expired on its last attempt
			dead = append(dead, &rw)
			continue
		}
		if err := json.Unmarshal(metadata, &rw.metadata); err != nil {
			// Written behind the outbox's back: publish without it rather
			// than hold the row (and its key) for ever.
			r.cfg.Logger.Error("relay: outbox row metadata is not a JSON object of strings; publishing without it",
				slog.String("id", rw.id.String()), slog.String("error", err.Error()))
			rw.metadata = nil
		}
		out = append(out, &rw)
	}
	if err := rows.Err(); err != nil { // the commit's error included
		return nil, 0, fmt.Errorf("claim: %w", err)
	}
	r.frontier.Took(from, oldest)
	for _, rw := range dead {
		r.tel.Dead(rw.topic)
		r.cfg.Logger.Error("relay: outbox row is dead: its publish attempts ran out",
			slog.String("id", rw.id.String()), slog.String("topic", rw.topic), slog.Int("attempts", rw.attempt))
	}
	return out, n, nil
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
		m := message.NewMessage(rw.id.String(), rw.payload)
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

// outcomeArgs are outcomes as the parameters of completeSQL and chargeSQL.
// Ids go as text (the statements cast them to uuid[]) and statuses as
// plain strings: pgx encodes a []uuid.UUID, or a slice of a named string
// type, only when it knows the parameter's type, which the exec and
// simple_protocol query modes never tell it.
type outcomeArgs struct {
	ids, statuses []string
	delays        []int64
	refunds, days []int32 // days: the partition a row's id puts it in
	errs          []*string
}

func newOutcomeArgs(outcomes []outcome) outcomeArgs {
	n := len(outcomes)
	a := outcomeArgs{ids: make([]string, n), statuses: make([]string, n), delays: make([]int64, n),
		refunds: make([]int32, n), days: make([]int32, n), errs: make([]*string, n)}
	for i, o := range outcomes {
		a.ids[i], a.statuses[i], a.delays[i] = o.id.String(), string(o.status), o.delay.Milliseconds()
		if d, ok := partition.UUIDDay(o.id); ok {
			a.days[i] = int32(d)
		}
		if o.refund {
			a.refunds[i] = 1
		}
		if o.err != "" {
			a.errs[i] = &outcomes[i].err
		}
	}
	return a
}

// complete records outcomes, fenced by token, and reports whether it did.
// While it cannot (the database is down, or rejects the update), it
// retries, and the relay claims nothing more (workloop.Record): rows
// published again and again while their outcomes go nowhere would flood
// the consumers. Only Stop's deadline makes it give up; the rows are then
// published again once their lease expires, which consumers dedupe.
func (r *Relay) complete(token int64, outcomes []outcome) bool {
	n := len(outcomes)
	a := newOutcomeArgs(outcomes)
	var recorded int
	err := r.loop.Record("publish outcomes", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), bookkeepingTimeout)
		defer cancel()
		var err error
		recorded, err = r.recordOutcomes(ctx, r.q.complete, token, a.ids, a.statuses, a.delays, a.refunds, a.errs, a.days)
		return err
	})
	if err == nil && recorded < n {
		r.cfg.Logger.Warn("relay: some outcomes were not recorded because another relay had taken the rows over (lease expired)",
			slog.Int("rows", n), slog.Int("recorded", recorded))
	}
	return err == nil
}

// recordOutcomes runs query (completeSQL or chargeSQL) and counts the rows
// it recorded dead once it has committed; a row its fence leaves alone is
// not recorded. It returns how many rows it recorded.
func (r *Relay) recordOutcomes(ctx context.Context, query string, args ...any) (int, error) {
	rows, err := r.pool.Query(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var (
		recorded int
		dead     []string // their topics
	)
	for rows.Next() {
		var (
			status pgbox.OutboxStatus
			topic  string
		)
		if err := rows.Scan(&status, &topic); err != nil {
			return 0, err
		}
		recorded++
		if status == pgbox.OutboxDead {
			dead = append(dead, topic)
		}
	}
	if err := rows.Err(); err != nil { // the commit's error included
		return 0, err
	}
	for _, topic := range dead {
		r.tel.Dead(topic)
	}
	return recorded, nil
}
