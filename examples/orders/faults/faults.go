// Package faults injects the duplicate deliveries the demo must survive, and
// records what each consumer was delivered so that the demo can show how many
// duplicates each hop absorbed.
//
// None of this belongs in a real service. Brokers, relays and networks
// produce duplicates on their own (a relay that dies between publishing and
// recording, a subscriber killed before it acknowledges, a lost ack); the
// demo makes them frequent enough to see in a short run.
package faults

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox/examples/orders/ddl"
)

// sampler picks a fraction of calls evenly, one in every 1/rate, from a
// random start, rather than each at random: a short run then gets its
// share of faults. At random, a hop of 120 deliveries at 3% a fault (two
// kinds) got none about once in 1,500 runs, and the demo's check that the
// hop absorbed duplicates failed with nothing wrong.
type sampler struct {
	period, phase uint64
	calls         atomic.Uint64
}

// newSampler returns a sampler of a fraction rate (0 < rate ≤ 1).
func newSampler(rate float64) *sampler {
	period := max(1, uint64(math.Round(1/rate)))
	return &sampler{period: period, phase: rand.Uint64N(period)}
}

// pick reports whether this call is one of the fraction.
func (s *sampler) pick() bool { return (s.calls.Add(1)+s.phase)%s.period == 0 }

// injectedKey marks, in a message's context, a delivery that Redeliver made
// up.
type injectedKey struct{}

// Redeliver returns a handler that passes each message to next and then,
// for a fraction rate of them (one in every 1/rate), passes it again, as a broker does when an
// acknowledgement is lost. The second delivery is a copy with the same UUID,
// metadata and payload, marked as injected for DeliveryLog.
func Redeliver(rate float64, next message.NoPublishHandlerFunc) message.NoPublishHandlerFunc {
	if rate <= 0 {
		return next
	}
	s := newSampler(rate)
	return func(m *message.Message) error {
		if err := next(m); err != nil {
			return err
		}
		if !s.pick() {
			return nil
		}
		again := m.Copy()
		again.SetContext(context.WithValue(m.Context(), injectedKey{}, true))
		return next(again)
	}
}

// DuplicatingPublisher publishes every message, then publishes a fraction
// of them (one in every 1/rate) a second time under the same UUID: what a
// relay does when it dies after publishing a batch and before recording
// it (pgbox's relay then publishes the batch again once its lease
// expires). Make one with NewDuplicatingPublisher.
type DuplicatingPublisher struct {
	message.Publisher
	s *sampler // nil: no duplicates
}

// NewDuplicatingPublisher returns pub, publishing a fraction rate of its
// messages twice; rate 0 publishes each once.
func NewDuplicatingPublisher(pub message.Publisher, rate float64) DuplicatingPublisher {
	d := DuplicatingPublisher{Publisher: pub}
	if rate > 0 {
		d.s = newSampler(rate)
	}
	return d
}

// Publish publishes msgs, and some of them again.
func (p DuplicatingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	if p.s == nil {
		return nil
	}
	var again []*message.Message
	for _, m := range msgs {
		if p.s.pick() {
			again = append(again, m.Copy())
		}
	}
	if len(again) == 0 {
		return nil
	}
	return p.Publisher.Publish(topic, again...)
}

// DeliveriesTableSQL creates the table DeliveryLog writes, in the consumer
// service's schema (rendered by ddl.Render).
const DeliveriesTableSQL = `
CREATE TABLE IF NOT EXISTS {schema}.deliveries (
    seq          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id   text        NOT NULL,
    injected     boolean     NOT NULL,
    process      text        NOT NULL,
    delivered_at timestamptz NOT NULL DEFAULT now()
)`

// DeliveryLog records every delivery a consumer acknowledged, one row each,
// so that deliveries minus the messages its inbox stored is the number of
// duplicates the inbox absorbed.
//
// A row is written after the inbox has stored (or recognised) the message
// and before the broker is acknowledged. If the process dies in between,
// the broker delivers the message again and that delivery is logged, so every
// stored message has at least one logged delivery and the count of absorbed
// duplicates is never overstated.
type DeliveryLog struct {
	insertSQL string
	pool      *pgxpool.Pool
	process   string
}

// insertDeliverySQL logs one delivery. It switches synchronous_commit off
// for its own transaction (set_config's third argument): a per-statement
// setting, so the pool needs no startup parameter or session state, which
// a transaction-pooling PgBouncer would refuse or hand to other clients.
const insertDeliverySQL = `
INSERT INTO {schema}.deliveries (message_id, injected, process)
SELECT $1::text, $2::boolean, $3::text
FROM (SELECT pg_catalog.set_config('synchronous_commit', 'off', true)) AS async`

// NewDeliveryLog returns a log that names process as the receiver and
// writes to the deliveries table of schema. It writes through a small pool
// of its own, configured like cfg, with synchronous_commit off for its
// writes: the log is instrumentation, and losing its last
// rows to a PostgreSQL crash would cost nothing but a count. That makes a
// row cost one round trip and no disk flush, so the log hardly slows the
// hop it measures (a Watermill subscription handles its messages one at a
// time). Close it when done.
func NewDeliveryLog(ctx context.Context, cfg *pgxpool.Config, schema, process string) (*DeliveryLog, error) {
	cfg = cfg.Copy()
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &DeliveryLog{insertSQL: ddl.Render(schema, insertDeliverySQL), pool: pool, process: process}, nil
}

// Close closes the log's pool.
func (l *DeliveryLog) Close() { l.pool.Close() }

// Wrap returns a handler that runs next and, when next succeeded (the
// broker will be acknowledged), logs the delivery.
func (l *DeliveryLog) Wrap(next message.NoPublishHandlerFunc) message.NoPublishHandlerFunc {
	return func(m *message.Message) error {
		if err := next(m); err != nil {
			return err
		}
		injected, _ := m.Context().Value(injectedKey{}).(bool)
		_, err := l.pool.Exec(m.Context(), l.insertSQL, m.UUID, injected, l.process)
		if err != nil {
			// Nack: the broker delivers the message again, and the inbox
			// recognises it.
			return fmt.Errorf("log delivery: %w", err)
		}
		return nil
	}
}
