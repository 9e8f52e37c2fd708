// watermill-amqp v3.0.2 races on its own connection state when RabbitMQ
// goes away (ConnectionWrapper.connected, written by handleConnectionClose
// and read by IsConnected unlocked; ThreeDotsLabs/watermill#693, open) in
// the subscriber these tests use, so they run only without -race: make
// test runs them in its PgBouncer pass. Package rabbitmq tests its own
// publisher, under -race.

//go:build !race

package test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/brokertest"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/tables"
	"github.com/pgbox/pgbox/rabbitmq"
	"github.com/pgbox/pgbox/relay"
)

// TestRabbitMQ runs pgbox through RabbitMQ (Debian's rabbitmq-server, one
// of the test's own, scripts/rabbitmq.sh) and watermill-amqp with
// publisher confirms. Its subtests share the broker, one after the other.
func TestRabbitMQ(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, brokertest.RabbitMQ)
	t.Run("QueuesExistBeforeTheFirstPublish", func(t *testing.T) { runRabbitTopology(t, srv.URL()) })
	t.Run("KilledMidRun", func(t *testing.T) { runRabbitKilled(t, srv) })
	t.Run("AnUnnamedConsumerIsToldWhatItMissed", func(t *testing.T) { runRabbitUnnamedConsumer(t, srv.URL()) })
	t.Run("ADeletedQueueFailsThePublish", func(t *testing.T) { runRabbitDeletedQueue(t, srv.URL()) })
}

// A consumer the producer's NewPublisher does not name has no queue until
// its subscriber first declares it: what the relay published before then
// went only to the named consumers' queues, and the outbox counts it
// published. The subscriber (SubscriberConfig) says so, once, at error
// level, naming the fix; it says nothing for a consumer that was named,
// for a topic nothing was published to, or when it subscribes again. It
// said nothing at all before the check was added.
func runRabbitUnnamedConsumer(t *testing.T, url string) {
	const topic = "late"
	pub, err := rabbitmq.NewPublisher(url, []string{"payments"}, watermillLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	p := newProducer(t, topic)
	p.startRelay(t, pub)
	for i := range 5 {
		p.place(t, order{ID: orderID(i), Cents: i}, "", true)
	}
	waitPublished(t, p)

	logs := &logtest.Recorder{}
	logger := watermill.NewSlogLogger(slog.New(logs))
	const missed = `has no queue "late.mail", though topic "late" has been published to`
	subscribe := func(consumer, topic string) <-chan *message.Message {
		sub, err := amqp.NewSubscriber(rabbitmq.SubscriberConfig(url, consumer), logger)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Close() })
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		msgs, err := sub.Subscribe(ctx, topic)
		require.NoError(t, err)
		return msgs
	}
	mail := subscribe("mail", topic)
	recs := logs.Records(slog.LevelError, missed)
	require.Len(t, recs, 1, "the consumer not named is told it missed what was published")
	require.Contains(t, recs[0].Message, `Name "mail" among the consumers in the producer's rabbitmq.NewPublisher`)

	subscribe("mail", topic)
	subscribe("payments", topic)
	subscribe("mail", "nothing-published")
	require.Equal(t, 1, logs.Count(slog.LevelError, "rabbitmq: consumer"), "said once, and only where messages were missed")

	// From now on the queue exists, and the consumer gets what follows.
	id := p.place(t, order{ID: orderID(5), Cents: 5}, "", true)
	select {
	case m := <-mail:
		require.Equal(t, id.String(), m.UUID)
		m.Ack()
	case <-time.After(time.Minute):
		t.Fatal("the consumer did not receive what was published after it subscribed")
	}
}

// A message that reaches no queue (the consumer's queue deleted behind
// the publisher's back) is returned by RabbitMQ, and its row is charged
// an attempt, not marked published and not taken for an outage; the
// publisher declares the queue again, and the retry lands in it. Before
// the publisher handled returns, the rows were marked published and the
// queue was gone.
func runRabbitDeletedQueue(t *testing.T, url string) {
	const topic, rows = "deleted", 5
	pub, err := rabbitmq.NewPublisher(url, []string{"payments"}, watermillLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	p := newProducer(t, topic)
	logs := &logtest.Recorder{}
	p.startRelayWith(t, relay.Config{Logger: slog.New(logs), Publisher: pub})
	p.place(t, order{ID: orderID(0)}, "", true)
	waitPublished(t, p)

	conn, err := amqp091.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	queue := rabbitmq.Queue(topic, "payments")
	_, err = ch.QueueDelete(queue, false, false, false)
	require.NoError(t, err)

	for i := 1; i <= rows; i++ {
		p.place(t, order{ID: orderID(i), Cents: i}, "", true)
	}
	waitPublished(t, p)
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err, "the queue is declared again")
	require.Equal(t, rows, q.Messages, "every row placed after the delete is in it")
	var charged, dead int
	require.NoError(t, p.pool.QueryRow(context.Background(), ident.Render(
		"SELECT count(*) FILTER (WHERE errors::text LIKE '%returned message%unroutable%'), count(*) FILTER (WHERE status = "+tables.OutboxDead+
			") FROM /* schema */outbox", p.schema)).Scan(&charged, &dead))
	require.Positive(t, charged, "rows whose message was returned were charged")
	require.Zero(t, dead)
	require.Zero(t, logs.Count(slog.LevelError, "the broker is unreachable"), "a refusal, not an outage")
}

// RabbitMQ confirms a publish to an exchange no queue is bound to, and
// drops it: with watermill-amqp's stock pub/sub configuration, a relay
// that publishes before its consumer first subscribes loses the message.
// rabbitmq.NewPublisher declares the consumers' queues first.
func runRabbitTopology(t *testing.T, url string) {
	logger := watermillLogger(t)
	conn, err := amqp091.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	// waiting is how many messages wait in the queue, declared as the
	// consumer's subscriber would declare it.
	waiting := func(queue string) int {
		q, err := ch.QueueDeclare(queue, true, false, false, false, nil)
		require.NoError(t, err)
		return q.Messages
	}
	msg := func() *message.Message { return message.NewMessage(uuid.NewString(), []byte("{}")) }

	stockCfg := amqp.NewDurablePubSubConfig(url, func(topic string) string { return rabbitmq.Queue(topic, "payments") })
	stockCfg.Publish.ConfirmDelivery = true
	stock, err := amqp.NewPublisher(stockCfg, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = stock.Close() })
	require.NoError(t, stock.Publish("stock", msg()), "confirmed...")
	require.Zero(t, waiting(rabbitmq.Queue("stock", "payments")), "...and lost: the pitfall")

	safe, err := rabbitmq.NewPublisher(url, []string{"payments", "mail"}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = safe.Close() })
	require.NoError(t, safe.Publish("safe", msg(), msg()))
	require.Equal(t, 2, waiting(rabbitmq.Queue("safe", "payments")), "kept for a consumer not yet started")
	require.Equal(t, 2, waiting(rabbitmq.Queue("safe", "mail")), "and for each consumer named")

	_, err = rabbitmq.NewPublisher(url, nil, logger)
	require.ErrorContains(t, err, "name every consumer")
}

// Orders flow outbox → relay → RabbitMQ → inbox → dispatcher while the
// broker is SIGKILLed and restarted: every order is paid exactly once,
// and no row is dead though each may fail only 3 times.
func runRabbitKilled(t *testing.T, srv *brokertest.Server) {
	logger := watermillLogger(t)
	pub, err := rabbitmq.NewPublisher(srv.URL(), []string{"payments"}, logger)
	require.NoError(t, err)
	sub, err := amqp.NewSubscriber(rabbitmq.SubscriberConfig(srv.URL(), "payments"), logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
	b := broker{publisher: pub, subscriber: sub, topic: "orders"}
	p := newProducer(t, b.topic)
	c := startConsumer(t, b)
	logs := &logtest.Recorder{}
	r := p.startRelayWith(t, relay.Config{
		Logger:            slog.New(logs),
		MaxAttempts:       3,
		OutageBackoffFunc: func(int) time.Duration { return 100 * time.Millisecond },
		Publisher:         pub,
	})

	const orders = 1000
	for i := range orders / 2 {
		p.place(t, order{ID: orderID(i), Cents: i}, fmt.Sprintf("customer-%d", i%10), true)
	}
	require.Eventually(t, func() bool { return publishedRows(t, p) >= orders/4 }, time.Minute, 5*time.Millisecond)
	srv.Kill(t)
	for i := orders / 2; i < orders; i++ {
		p.place(t, order{ID: orderID(i), Cents: i}, fmt.Sprintf("customer-%d", i%10), true)
	}
	require.Eventually(t, func() bool { return r.BrokerErr() != nil }, time.Minute, 5*time.Millisecond)
	srv.Restart(t)

	waitPublished(t, p)
	c.waitSettled(t, 2*orders, orders)
	payments := c.paymentsPerOrder(t)
	require.Len(t, payments, orders)
	for id, n := range payments {
		require.Equal(t, 1, n, "order %s must be paid exactly once", id)
	}
	var dead int
	require.NoError(t, p.pool.QueryRow(context.Background(), ident.Render(
		"SELECT count(*) FROM /* schema */outbox WHERE status = "+tables.OutboxDead, p.schema)).Scan(&dead))
	require.Zero(t, dead)
	require.Equal(t, 1, logs.Count(slog.LevelError, "the broker is unreachable"))
	require.Equal(t, 1, logs.Count(slog.LevelInfo, "the broker is reachable again"))
}
