// Package test holds pgbox's cross-package end-to-end and fault tests:
// producer service → outbox → relay → a real broker → consumer inbox →
// dispatcher, with the faults injected along the way.
package test

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/natstest"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
	"github.com/pgbox/pgbox/watermillinbox"
)

func TestMain(m *testing.M) { pgtest.Main(m, pgtest.PubSubGoroutines...) }

// broker is a real message broker, seen through Watermill.
type broker struct {
	// idFunc is the consumer's watermillinbox.Config.IDFunc; nil for the
	// default, the Watermill UUID.
	idFunc func(*message.Message) (string, error)
	// idTimeFunc is the consumer's watermillinbox.Config.IDTimeFunc.
	idTimeFunc func(*message.Message) time.Time
	publisher  message.Publisher
	subscriber message.Subscriber
	topic      string
}

func watermillLogger(t testing.TB) watermill.LoggerAdapter {
	return watermill.NewSlogLogger(slog.New(slog.NewTextHandler(logtest.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// sqlBroker is Watermill's PostgreSQL Pub/Sub (watermill-sql) in schema:
// the zero-extra-server broker. Its payload column is BYTEA, because pgbox
// payloads are bytes, not necessarily JSON.
func sqlBroker(t testing.TB, pool *pgxpool.Pool, schema string) broker {
	t.Helper()
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	schemaAdapter := wmsql.DefaultPostgreSQLSchema{
		GenerateMessagesTableName: func(topic string) string { return ident.Quote(schema) + "." + ident.Quote("watermill_"+topic) },
		GeneratePayloadType:       func(string) string { return "BYTEA" },
	}
	offsets := wmsql.DefaultPostgreSQLOffsetsAdapter{
		GenerateMessagesOffsetsTableName: func(topic string) string {
			return ident.Quote(schema) + "." + ident.Quote("watermill_offsets_"+topic)
		},
	}
	logger := watermillLogger(t)
	pub, err := wmsql.NewPublisher(db, wmsql.PublisherConfig{SchemaAdapter: schemaAdapter, AutoInitializeSchema: true}, logger)
	require.NoError(t, err)
	sub, err := wmsql.NewSubscriber(db, wmsql.SubscriberConfig{
		ConsumerGroup:    "payments",
		InitializeSchema: true,
		OffsetsAdapter:   offsets,
		PollInterval:     20 * time.Millisecond,
		ResendInterval:   50 * time.Millisecond,
		SchemaAdapter:    schemaAdapter,
	}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
	topic := "orders"
	require.NoError(t, sub.SubscribeInitialize(topic))
	return broker{publisher: pub, subscriber: sub, topic: topic}
}

// natsBroker is NATS JetStream, from Debian's nats-server, with a stream of
// the test's own.
func natsBroker(t testing.TB, name string) broker {
	t.Helper()
	return natsBrokerAt(t, natstest.URL(t), name)
}

// natsBrokerAt is natsBroker on the NATS server at url.
func natsBrokerAt(t testing.TB, url, name string) broker {
	t.Helper()
	logger := watermillLogger(t)
	topic := "orders_" + name
	pub, err := jetstream.NewPublisher(jetstream.PublisherConfig{URL: url, Logger: logger})
	require.NoError(t, err)
	sub, err := jetstream.NewSubscriber(jetstream.SubscriberConfig{
		URL:                 url,
		Logger:              logger,
		AckWaitTimeout:      5 * time.Second,
		ResourceInitializer: jetstream.GroupedConsumer("payments"),
	})
	require.NoError(t, err)
	require.NoError(t, sub.SubscribeInitialize(topic))
	t.Cleanup(func() {
		_ = pub.Close()
		_ = sub.Close()
		if nc, err := nats.Connect(url); err == nil {
			if js, err := natsjs.New(nc); err == nil {
				_ = js.DeleteStream(context.Background(), topic)
			}
			nc.Close()
		}
	})
	return broker{publisher: pub, subscriber: sub, topic: topic}
}

// order is the producer's business event.
type order struct {
	Cents int    `json:"cents"`
	ID    string `json:"order"`
}

// producer is a service that places orders: the order row and its
// OrderPlaced message commit in one transaction.
type producer struct {
	outbox *outbox.Outbox
	pool   *pgxpool.Pool
	schema string
	topic  string
}

func newProducer(t testing.TB, topic string) *producer {
	t.Helper()
	p := &producer{pool: pgtest.Pool(t), schema: pgtest.Schema(t), topic: topic}
	var err error
	p.outbox, err = outbox.New(p.pool, outbox.Config{Schema: p.schema})
	require.NoError(t, err)
	_, err = p.pool.Exec(context.Background(), ident.Render("CREATE TABLE /* schema */orders (id text PRIMARY KEY, cents int NOT NULL)", p.schema))
	require.NoError(t, err)
	return p
}

// traceOf is the trace each order is placed under, so the test can tell
// that the consumer's handler continued the right one.
func traceOf(orderID string) trace.SpanContext {
	sum := sha256.Sum256([]byte(orderID))
	var tid trace.TraceID
	copy(tid[:], sum[:16])
	sid := trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
}

// place writes an order and its message in one transaction, committed or
// rolled back (a failed request).
func (p *producer) place(t testing.TB, o order, key string, commit bool) uuid.UUID {
	t.Helper()
	ctx := trace.ContextWithSpanContext(context.Background(), traceOf(o.ID))
	tx, err := p.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, ident.Render("INSERT INTO /* schema */orders VALUES ($1, $2)", p.schema), o.ID, o.Cents)
	require.NoError(t, err)
	body, err := json.Marshal(o)
	require.NoError(t, err)
	ids, err := p.outbox.Write(ctx, tx, outbox.Message{Topic: p.topic, EventType: "OrderPlaced", OrderingKey: key, Payload: body})
	require.NoError(t, err)
	if commit {
		require.NoError(t, tx.Commit(ctx))
	}
	return ids[0]
}

// startRelay runs a relay for the producer, stopped when the test ends.
func (p *producer) startRelay(t testing.TB, pub message.Publisher) {
	t.Helper()
	p.startRelayWith(t, relay.Config{
		Logger:    slog.New(slog.NewTextHandler(logtest.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn})),
		Publisher: pub,
	})
}

// startRelayWith runs a relay for the producer configured by cfg, with the
// tests' quick timings where cfg leaves them unset, stopped when the test
// ends.
func (p *producer) startRelayWith(t testing.TB, cfg relay.Config) *relay.Relay {
	t.Helper()
	cfg.ListenConnConfig = pgtest.ListenConnConfig(t)
	cfg.Schema = p.schema
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 20*time.Millisecond)
	cfg.Lease = cmp.Or(cfg.Lease, 2*time.Second)
	if cfg.RetryBackoffFunc == nil {
		cfg.RetryBackoffFunc = func(int) time.Duration { return 20 * time.Millisecond }
	}
	r, err := relay.New(p.pool, cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx))
	})
	return r
}

// consumer is a payments service: a Watermill router stores each delivery
// in its inbox (every delivery twice, by Watermill's Duplicator
// middleware), and a dispatcher records one payment per order in the
// transaction that marks the message done. The payments table has no
// unique key: a second payment for an order would show.
type consumer struct {
	acked  atomic.Int64 // deliveries the inbox acknowledged
	inbox  *inbox.Inbox
	pool   *pgxpool.Pool
	schema string
}

func startConsumer(t testing.TB, b broker) *consumer {
	t.Helper()
	ctx := context.Background()
	c := &consumer{pool: pgtest.Pool(t), schema: pgtest.Schema(t)}
	_, err := c.pool.Exec(ctx, c.sql(`CREATE TABLE /* schema */payments (
		seq bigserial PRIMARY KEY, order_id text NOT NULL, cents int NOT NULL, ordering_key text, trace_id text, message_id text)`))
	require.NoError(t, err)
	c.inbox, err = inbox.New(c.pool, inbox.Config{Consumer: "payments", Schema: c.schema})
	require.NoError(t, err)

	store := watermillinbox.Handler(watermillinbox.Config{IDFunc: b.idFunc, IDTimeFunc: b.idTimeFunc, Inbox: c.inbox})
	router, err := message.NewRouter(message.RouterConfig{}, watermillLogger(t))
	require.NoError(t, err)
	router.AddMiddleware(middleware.Duplicator)
	router.AddConsumerHandler("payments-inbox", b.topic, b.subscriber, func(m *message.Message) error {
		if err := store(m); err != nil {
			return err
		}
		c.acked.Add(1)
		return nil
	})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- router.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-router.Running()

	d, err := dispatcher.New(c.pool, dispatcher.Config{
		Inbox:            c.inbox,
		ListenConnConfig: pgtest.ListenConnConfig(t),
		PollInterval:     20 * time.Millisecond,
		Logger:           slog.New(slog.NewTextHandler(logtest.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn})),
		Handlers: map[string]dispatcher.Handler{
			"OrderPlaced": dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
				var o order
				if err := json.Unmarshal(m.Payload, &o); err != nil {
					return dispatcher.Permanent(err)
				}
				_, err := tx.Exec(ctx, c.sql("INSERT INTO /* schema */payments (order_id, cents, ordering_key, trace_id, message_id) VALUES ($1, $2, $3, $4, $5)"),
					o.ID, o.Cents, m.OrderingKey, trace.SpanContextFromContext(ctx).TraceID().String(), m.ID)
				return err
			}),
		},
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, d.Stop(stopCtx))
	})
	return c
}

func (c *consumer) sql(q string) string { return ident.Render(q, c.schema) }

// paymentsPerOrder counts payments by order id.
func (c *consumer) paymentsPerOrder(t testing.TB) map[string]int {
	t.Helper()
	rows, err := c.pool.Query(context.Background(), c.sql("SELECT order_id, count(*) FROM /* schema */payments GROUP BY 1"))
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var (
			id string
			n  int
		)
		require.NoError(t, rows.Scan(&id, &n))
		out[id] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// waitSettled waits until the consumer has acknowledged at least
// deliveries deliveries, its inbox holds at least messages distinct
// messages, and its dispatcher has nothing left to do. Both counts are
// needed: a broker's redeliveries (an ack lost when it was killed) add
// deliveries without adding messages, so deliveries alone can be reached
// while messages are still on their way; and a test that injects
// duplicates waits on deliveries to know they were all stored, and tried.
//
// If they are not reached, the failure says what was last seen, and the
// server's oldest transactions: watermill-sql's subscriber reads only
// messages whose transaction is older than every transaction still open
// on the server (pg_snapshot_xmin), so one left open anywhere holds its
// deliveries back.
func (c *consumer) waitSettled(t testing.TB, deliveries int64, messages int) {
	t.Helper()
	var stored, busy atomic.Int64 // as last seen
	require.Eventually(t, func() bool {
		if c.acked.Load() < deliveries {
			return false
		}
		var s, b int64
		require.NoError(t, c.pool.QueryRow(context.Background(), c.sql(
			"SELECT count(*), count(*) FILTER (WHERE status IN ('pending', 'running')) FROM /* schema */inbox")).Scan(&s, &b))
		stored.Store(s)
		busy.Store(b)
		return s >= int64(messages) && b == 0
	}, 60*time.Second, 20*time.Millisecond, later(func() string {
		return fmt.Sprintf("consumer acknowledged %d of %d deliveries; its inbox held %d of %d messages, %d of them not yet handled, when last read; "+
			"the server's oldest transactions:\n%s", c.acked.Load(), deliveries, stored.Load(), messages, busy.Load(), oldestTransactions(c.pool))
	}))
}

// oldestTransactions describes the server's oldest open transactions that
// hold a transaction id, for a failure message.
func oldestTransactions(pool *pgxpool.Pool) string {
	var out string
	err := pool.QueryRow(context.Background(), `
		SELECT format('pg_snapshot_xmin=%s', pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())) || coalesce(E'\n' || string_agg(
		           format('pid=%s xid=%s xact_start=%s state=%s app=%s query=%s', pid, backend_xid, xact_start, state, application_name,
		                  left(regexp_replace(query, '\s+', ' ', 'g'), 120)), E'\n' ORDER BY xact_start), '')
		FROM (SELECT * FROM pg_catalog.pg_stat_activity WHERE backend_xid IS NOT NULL ORDER BY xact_start LIMIT 5) AS a`).Scan(&out)
	if err != nil {
		return "(not read: " + err.Error() + ")"
	}
	return out
}

// later is a failure message made when it is printed.
type later func() string

func (l later) String() string { return l() }

func orderID(i int) string { return fmt.Sprintf("order-%04d", i) }
