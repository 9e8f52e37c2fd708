package relay

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/pgbox/pgbox"
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
	leaseExpiredError = "lease expired before the publish was recorded: the relay crashed, stalled, or its publish hung; publishing again"
)

// row is a claimed outbox row.
type row struct {
	attempt     int
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
// broker is unreachable it first waits for its turn to probe it (outage).
func (r *Relay) runBatch() (int, error) {
	if !r.outage.await(r.loop.StopSignal()) {
		return 0, nil
	}
	token := r.proc.Token()
	rows, n, err := r.claim(token)
	if err != nil || len(rows) == 0 {
		r.outage.idle()
		return n, err
	}
	outcomes := make([]outcome, 0, len(rows))
	var (
		reached bool  // the broker answered a publish of this round
		down    error // a publish found it unreachable: publish no more this round
	)
	for _, group := range byTopic(rows) {
		if down != nil || r.loop.CancelledByStop() {
			outcomes = released(outcomes, group)
			continue
		}
		msgs := toMessages(group)
		end := r.tel.Publishing(group[0].topic, msgs)
		err := r.cfg.Publisher.Publish(group[0].topic, msgs...)
		end(err)
		switch {
		case err == nil:
			reached = true
			for _, rw := range group {
				outcomes = append(outcomes, outcome{id: rw.id, status: pgbox.OutboxPublished})
			}
		case !reached && r.cfg.UnreachableFunc(err):
			down = err // an outage: not the rows' fault
			outcomes = released(outcomes, group)
		default:
			// The broker refused these rows, or went away after taking
			// others of this round: charged, as any failure.
			if r.cfg.UnreachableFunc(err) {
				down = err
			} else {
				reached = true
			}
			for _, rw := range group {
				outcomes = append(outcomes, r.failed(rw, err))
			}
		}
	}
	if down != nil && !reached {
		r.outage.failed(down)
	} else {
		r.outage.reached()
	}
	r.complete(token, outcomes)
	return n, nil
}

// released returns outcomes with group's rows handed back unpublished:
// pending at once, their attempt refunded.
func released(outcomes []outcome, group []*row) []outcome {
	for _, rw := range group {
		outcomes = append(outcomes, outcome{id: rw.id, status: pgbox.OutboxPending, refund: true})
	}
	return outcomes
}

// claim takes a batch of rows. It returns the rows to publish and how many
// rows the claim took; they differ by the rows it marked dead.
func (r *Relay) claim(token int64) ([]*row, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bookkeepingTimeout)
	defer cancel()
	rows, err := r.pool.Query(ctx, r.q.claim, r.cfg.BatchSize, token, r.cfg.Lease.Milliseconds(), leaseExpiredError, r.cfg.MaxAttempts)
	if err != nil {
		return nil, 0, fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	var (
		out, dead []*row
		n         int
	)
	for rows.Next() {
		n++
		var (
			rw       row
			status   pgbox.OutboxStatus
			metadata []byte
		)
		if err := rows.Scan(&rw.id, &status, &rw.topic, &rw.eventType, &rw.orderingKey, &rw.payload, &metadata, &rw.attempt, &rw.seq); err != nil {
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

// complete records outcomes, fenced by token. While it cannot (the
// database is down, or rejects the update), it retries, and the relay
// claims nothing more (workloop.Record): rows published again and again
// while their outcomes go nowhere would flood the consumers. Only Stop's
// deadline makes it give up; the rows are then published again once
// their lease expires, which consumers dedupe.
func (r *Relay) complete(token int64, outcomes []outcome) {
	n := len(outcomes)
	// Ids go as text (completeSQL casts them to uuid[]) and statuses as
	// plain strings: pgx encodes a []uuid.UUID, or a slice of a named
	// string type, only when it knows the parameter's type, which the exec
	// and simple_protocol query modes never tell it.
	ids, statuses := make([]string, n), make([]string, n)
	delays, refunds, errs := make([]int64, n), make([]int32, n), make([]*string, n)
	for i, o := range outcomes {
		ids[i], statuses[i], delays[i] = o.id.String(), string(o.status), o.delay.Milliseconds()
		if o.refund {
			refunds[i] = 1
		}
		if o.err != "" {
			errs[i] = &outcomes[i].err
		}
	}
	var recorded int
	err := r.loop.Record("publish outcomes", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), bookkeepingTimeout)
		defer cancel()
		var err error
		recorded, err = r.recordOutcomes(ctx, token, ids, statuses, delays, refunds, errs)
		return err
	})
	if err == nil && recorded < n {
		r.cfg.Logger.Warn("relay: some outcomes were not recorded because another relay had taken the rows over (lease expired)",
			slog.Int("rows", n), slog.Int("recorded", recorded))
	}
}

// recordOutcomes runs completeSQL and counts the rows it recorded dead
// once it has committed; a row another relay had taken over is not
// recorded. It returns how many rows it recorded.
func (r *Relay) recordOutcomes(ctx context.Context, args ...any) (int, error) {
	rows, err := r.pool.Query(ctx, r.q.complete, args...)
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
