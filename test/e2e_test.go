package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// Every committed business change causes exactly one downstream effect,
// and no rolled-back one causes any, through a real broker, with duplicate
// deliveries injected at the consumer (each delivery twice) and at the
// broker (messages published again under the same id). The producer's
// trace continues in the consumer's handler.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	t.Run("WatermillSQL", func(t *testing.T) {
		t.Parallel()
		pool, brokerSchema := pgtest.Pool(t), pgtest.Schema(t)
		runEndToEnd(t, sqlBroker(t, pool, brokerSchema))
	})
	t.Run("NATSJetStream", func(t *testing.T) {
		t.Parallel()
		runEndToEnd(t, natsBroker(t, uuid.NewString()[:8]))
	})
}

func runEndToEnd(t *testing.T, b broker) {
	p := newProducer(t, b.topic)
	c := startConsumer(t, b)
	p.startRelay(t, b.publisher)

	const orders = 150
	var committed []uuid.UUID
	paid := map[string]bool{}
	for i := range orders {
		commit := i%5 != 3 // one request in five fails and rolls back
		id := p.place(t, order{ID: orderID(i), Cents: 100 + i}, fmt.Sprintf("customer-%d", i%7), commit)
		if commit {
			committed = append(committed, id)
			paid[orderID(i)] = true
		}
	}
	waitPublished(t, p)

	// The broker delivers some messages again.
	injected := republish(t, p, b, committed[:25])
	c.waitSettled(t, int64(2*(len(committed)+injected)), len(committed))

	payments := c.paymentsPerOrder(t)
	require.Len(t, payments, len(paid), "no rolled-back order may be paid")
	for id := range paid {
		require.Equal(t, 1, payments[id], "order %s must be paid exactly once", id)
	}

	rows, err := c.pool.Query(context.Background(), c.sql("SELECT order_id, trace_id FROM /* schema */payments"))
	require.NoError(t, err)
	for rows.Next() {
		var id, traceID string
		require.NoError(t, rows.Scan(&id, &traceID))
		require.Equal(t, traceOf(id).TraceID().String(), traceID, "the handler of %s must continue its producer's trace", id)
	}
	require.NoError(t, rows.Err())
}

// waitPublished waits until the producer's outbox has nothing left to
// publish.
func waitPublished(t testing.TB, p *producer) {
	t.Helper()
	require.Eventually(t, func() bool {
		var busy bool
		require.NoError(t, p.pool.QueryRow(context.Background(), ident.Render(
			"SELECT EXISTS (SELECT 1 FROM /* schema */outbox WHERE status IN ('pending', 'running'))", p.schema)).Scan(&busy))
		return !busy
	}, 60*time.Second, 20*time.Millisecond)
}

// republish publishes the outbox rows ids again, exactly as the relay
// would (same UUID), as a broker redelivering them would deliver them.
func republish(t testing.TB, p *producer, b broker, ids []uuid.UUID) int {
	t.Helper()
	rows, err := p.pool.Query(context.Background(), ident.Render(
		"SELECT id, payload, metadata, event_type, coalesce(ordering_key, '') FROM /* schema */outbox WHERE id = ANY($1)", p.schema), ids)
	require.NoError(t, err)
	msgs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*message.Message, error) {
		var (
			id                  uuid.UUID
			payload             []byte
			metadata            map[string]string
			eventType, orderKey string
		)
		if err := r.Scan(&id, &payload, &metadata, &eventType, &orderKey); err != nil {
			return nil, err
		}
		m := message.NewMessage(id.String(), payload)
		for k, v := range metadata {
			m.Metadata.Set(k, v)
		}
		m.Metadata.Set(pgbox.MetadataEventType, eventType)
		m.Metadata.Set(pgbox.MetadataOrderingKey, orderKey)
		return m, nil
	})
	require.NoError(t, err)
	require.Len(t, msgs, len(ids))
	require.NoError(t, b.publisher.Publish(b.topic, msgs...))
	return len(msgs)
}
