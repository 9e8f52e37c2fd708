package test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/brokertest"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/sqstest"
	"github.com/pgbox/pgbox/relay"
	"github.com/pgbox/pgbox/sqs"
	"github.com/pgbox/pgbox/watermillinbox"
)

// TestSQS runs pgbox through Amazon SQS's wire protocol: the AWS SDK for
// Go v2 against goaws (scripts/goaws.sh), one server of the test's own
// that its subtests share, each on queues of its own.
func TestSQS(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, brokertest.GoAWS)
	t.Run("ARepublishIsANewMessageDedupedByOutboxID", func(t *testing.T) { runSQSRepublish(t, srv.URL()) })
	t.Run("AHandlerSlowerThanTheVisibilityTimeout", func(t *testing.T) { runSQSSlowHandler(t, srv.URL()) })
	t.Run("AConsumerKilledBeforeDelete", func(t *testing.T) { runSQSKilledBeforeDelete(t, srv.URL(), false) })
	t.Run("AForeignMessageDedupedOnMessageId", func(t *testing.T) { runSQSKilledBeforeDelete(t, srv.URL(), true) })
}

// sqsBroker creates queue (visibility timeout visibility) on the SQS
// endpoint url, and returns pgbox's publisher and a subscriber with cfg
// (its Client set) on it, closed with the test.
func sqsBroker(t *testing.T, url, queue string, visibility time.Duration, cfg sqs.SubscriberConfig) broker {
	t.Helper()
	client := sqstest.Client(url)
	sqstest.CreateQueue(t, client, queue, visibility)
	pub, err := sqs.NewPublisher(sqs.PublisherConfig{Client: client})
	require.NoError(t, err)
	cfg.Client = client
	cfg.Logger = slog.New(slog.NewTextHandler(logtest.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	sub, err := sqs.NewSubscriber(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
	return broker{publisher: pub, subscriber: sub, topic: queue}
}

// A row the relay publishes again (SQS took it, and the answer was lost)
// is a new SQS message, with a new MessageId: the queue holds both. The
// consumer's inbox dedupes on the outbox id the message carries, and the
// order is paid once; deduping on MessageId would pay it twice.
func runSQSRepublish(t *testing.T, url string) {
	const orders = 30
	b := sqsBroker(t, url, "republish", 30*time.Second, sqs.SubscriberConfig{})
	p := newProducer(t, b.topic)
	var ids []string
	for i := range orders {
		ids = append(ids, p.place(t, order{ID: orderID(i), Cents: i}, fmt.Sprintf("customer-%d", i%4), true).String())
	}
	pub := &ackLost{Publisher: b.publisher, lose: map[string]bool{}}
	again := 0
	for i := 0; i < orders; i += 3 {
		pub.lose[ids[i]] = true
		again++
	}
	quiet := slog.New(slog.NewTextHandler(logtest.Output(t), &slog.HandlerOptions{Level: slog.LevelError}))
	p.startRelayWith(t, relay.Config{Logger: quiet, Publisher: pub})
	waitPublished(t, p)
	client := sqstest.Client(url)
	queueURL := sqstest.CreateQueue(t, client, b.topic, 30*time.Second) // its URL: it exists
	require.Equal(t, orders+again, sqstest.Waiting(t, client, queueURL), "each message published again is a second SQS message")

	c := startConsumer(t, b)
	c.waitSettled(t, 2*int64(orders+again), orders) // each delivery twice (Duplicator)
	var stored, messageIDs int
	require.NoError(t, c.pool.QueryRow(context.Background(), c.sql(
		"SELECT count(*), count(DISTINCT metadata->>'"+sqs.MetadataMessageID+"') FROM /* schema */inbox WHERE message_id = ANY($1)"), ids).Scan(&stored, &messageIDs))
	require.Equal(t, orders, stored, "the inbox holds each outbox id once")
	require.Equal(t, orders, messageIDs, "with the MessageId of the copy it stored")
	payments := c.paymentsPerOrder(t)
	require.Len(t, payments, orders)
	for id, n := range payments {
		require.Equal(t, 1, n, "order %s must be paid exactly once", id)
	}
	require.Eventually(t, func() bool { return sqstest.Waiting(t, client, queueURL) == 0 }, 30*time.Second, 10*time.Millisecond,
		"every copy is acknowledged and deleted")
}

// A handler slower than the visibility timeout, on a subscriber that does
// not extend it (ExtendEvery -1), as SQS consumers commonly run: SQS hands
// the message to a second consumer while the first is still at work. The
// second stores it; the first, finishing, finds it stored and
// acknowledges it as a duplicate; the order is paid once.
func runSQSSlowHandler(t *testing.T, url string) {
	b := sqsBroker(t, url, "slow", time.Second, sqs.SubscriberConfig{})
	slow := sqsBroker(t, url, "slow", time.Second, sqs.SubscriberConfig{ExtendEvery: -1})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	first, err := slow.subscriber.Subscribe(ctx, "slow")
	require.NoError(t, err)
	id := publishOrder(t, b, orderID(0))
	m := <-first // the slow handler starts

	c := startConsumer(t, b) // the second consumer
	c.waitSettled(t, 2, 1)   // it received the message, stored it, and its dispatcher paid the order
	store := watermillinbox.Handler(watermillinbox.Config{Inbox: c.inbox})
	require.Equal(t, id, m.UUID)
	require.NoError(t, store(m), "the slow handler's late store is a duplicate, acknowledged")
	require.True(t, m.Ack())

	require.Equal(t, map[string]int{orderID(0): 1}, c.paymentsPerOrder(t))
	var stored int
	require.NoError(t, c.pool.QueryRow(context.Background(), c.sql("SELECT count(*) FROM /* schema */inbox")).Scan(&stored))
	require.Equal(t, 1, stored)
}

// A consumer that stored a message in its inbox and died before
// DeleteMessage: SQS delivers the message again once its visibility
// timeout ends, and the consumer that gets it acknowledges it as a
// duplicate. That holds for pgbox's messages, deduped on the outbox id,
// and for a foreign producer's, deduped on SQS's MessageId (by choice,
// with watermillinbox.UUIDOr: the MessageId stays the same through SQS's
// redeliveries). The foreign MessageId, dated by its SentTimestamp
// (sqs.SentTime), is kept in a day's partition, as a UUIDv7 would be.
func runSQSKilledBeforeDelete(t *testing.T, url string, foreign bool) {
	queue := "killed"
	if foreign {
		queue = "killed-foreign"
	}
	b := sqsBroker(t, url, queue, time.Second, sqs.SubscriberConfig{})
	b.idFunc = watermillinbox.UUIDOr(watermillinbox.MetadataID(sqs.MetadataMessageID))
	b.idTimeFunc = sqs.SentTime
	dying := sqsBroker(t, url, queue, time.Second, sqs.SubscriberConfig{ExtendEvery: -1})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	received, err := dying.subscriber.Subscribe(ctx, queue)
	require.NoError(t, err)

	var key string
	if foreign {
		client := sqstest.Client(url)
		body, err := json.Marshal(order{ID: orderID(0)})
		require.NoError(t, err)
		sent, err := client.SendMessage(context.Background(), &awssqs.SendMessageInput{
			QueueUrl:    aws.String(sqstest.CreateQueue(t, client, queue, time.Second)),
			MessageBody: aws.String(string(body)),
			MessageAttributes: map[string]types.MessageAttributeValue{
				pgbox.MetadataEventType: {DataType: aws.String("String"), StringValue: aws.String("OrderPlaced")},
			},
		})
		require.NoError(t, err)
		key = *sent.MessageId
	} else {
		key = publishOrder(t, b, orderID(0))
	}

	m := <-received
	c := startConsumer(t, b)
	store := watermillinbox.Handler(watermillinbox.Config{IDFunc: b.idFunc, IDTimeFunc: b.idTimeFunc, Inbox: c.inbox})
	require.NoError(t, store(m))
	// No Ack: the consumer dies before DeleteMessage. Close leaves the
	// message in flight, as a dead process would.
	require.NoError(t, dying.subscriber.Close())

	c.waitSettled(t, 2, 1) // redelivered, and acknowledged (twice: Duplicator)
	require.Equal(t, map[string]int{orderID(0): 1}, c.paymentsPerOrder(t))
	var keys []string
	require.NoError(t, c.pool.QueryRow(context.Background(), c.sql("SELECT array_agg(message_id) FROM /* schema */inbox")).Scan(&keys))
	require.Equal(t, []string{key}, keys)
	if foreign {
		// Dated: a day's bucket (days since 1970), not a generation's (0 or
		// below), found again by the redelivery.
		var bucket int
		require.NoError(t, c.pool.QueryRow(context.Background(), c.sql("SELECT bucket FROM /* schema */inbox")).Scan(&bucket))
		today := int(time.Now().Unix() / 86400)
		require.InDelta(t, today, bucket, 1, "the MessageId is dated by its SentTimestamp")
	}
}

// publishOrder publishes an OrderPlaced message for order id through b's
// publisher, as the relay would, and returns its id.
func publishOrder(t *testing.T, b broker, id string) string {
	t.Helper()
	body, err := json.Marshal(order{ID: id})
	require.NoError(t, err)
	msg := message.NewMessage(uuid.NewString(), body)
	msg.Metadata.Set(pgbox.MetadataEventType, "OrderPlaced")
	require.NoError(t, b.publisher.Publish(b.topic, msg))
	return msg.UUID
}

// An SQS outage (goaws killed, and restarted empty: it keeps its queues
// in memory) pauses the relay: no row is charged an attempt or goes dead
// though each may fail only twice, the logs say it once each way, and
// once SQS is back every order is paid exactly once. The consumer's
// subscriber receives again by itself.
func TestSQSOutageCostsNoAttempts(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, brokertest.GoAWS)
	const queue, orders, maxAttempts, visibility = "outage", 200, 2, 5 * time.Second
	b := sqsBroker(t, srv.URL(), queue, visibility, sqs.SubscriberConfig{WaitTime: 2 * time.Second})
	p := newProducer(t, b.topic)
	c := startConsumer(t, b)
	logs := &logtest.Recorder{}
	pub := &failCounter{Publisher: b.publisher}
	r := p.startRelayWith(t, relay.Config{
		Logger:            slog.New(logs),
		MaxAttempts:       maxAttempts,
		OutageBackoffFunc: func(int) time.Duration { return 100 * time.Millisecond },
		Publisher:         pub,
	})

	for i := range orders / 2 {
		p.place(t, order{ID: orderID(i), Cents: i}, fmt.Sprintf("customer-%d", i%7), true)
	}
	// goaws loses what it holds when killed (SQS itself is durable): the
	// first half is consumed before.
	c.waitSettled(t, orders, orders/2)
	srv.Kill(t)
	for i := orders / 2; i < orders; i++ {
		p.place(t, order{ID: orderID(i), Cents: i}, fmt.Sprintf("customer-%d", i%7), true)
	}
	require.Eventually(t, func() bool { return pub.failed.Load() > maxAttempts }, time.Minute, 10*time.Millisecond)
	require.ErrorContains(t, r.BrokerErr(), "the broker is unreachable")
	require.LessOrEqual(t, maxOutboxAttempts(t, p), 1, "an outage charges no attempt (the round under way has claimed one)")

	srv.Restart(t)
	sqstest.CreateQueue(t, sqstest.Client(srv.URL()), queue, visibility)
	requireOutageCostNothing(t, p, c, r, logs, orders)
}
