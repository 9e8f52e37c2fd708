package sqs_test

import (
	"context"
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
	"github.com/pgbox/pgbox/internal/sqstest"
	"github.com/pgbox/pgbox/relay"
	"github.com/pgbox/pgbox/sqs"
)

// receive subscribes to queue and returns the subscription's channel,
// ended with the test.
func receive(t *testing.T, sub *sqs.Subscriber, queue string) <-chan *message.Message {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, err := sub.Subscribe(ctx, queue)
	require.NoError(t, err)
	return msgs
}

// next returns the next message of msgs.
func next(t *testing.T, msgs <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-msgs:
		require.True(t, ok, "the subscription ended")
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no message within 30s")
		return nil
	}
}

// What the relay publishes arrives as it left: the UUID (the outbox id,
// the consumer's dedupe key), the metadata, and the payload's bytes,
// text or not; SQS's MessageId and SentTimestamp are added to the
// metadata. An acknowledged message is deleted, and a nacked one comes
// back.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, brokertest.GoAWS)
	client := sqstest.Client(srv.URL())
	url := sqstest.CreateQueue(t, client, "orders", 30*time.Second)
	pub, err := sqs.NewPublisher(sqs.PublisherConfig{Client: client})
	require.NoError(t, err)
	sub, err := sqs.NewSubscriber(sqs.SubscriberConfig{Client: client, NackDelay: -1, WaitTime: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })

	text := message.NewMessage(uuid.NewString(), []byte(`{"order":"ünïcode ✓"}`))
	text.Metadata.Set(pgbox.MetadataEventType, "OrderPlaced")
	text.Metadata.Set(pgbox.MetadataOrderingKey, "customer-1")
	text.Metadata.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	binary := message.NewMessage(uuid.NewString(), []byte{0, 1, 2, 0xff, 0xfe, 'x', 0})
	binary.Metadata.Set(pgbox.MetadataEventType, "Blob")
	require.NoError(t, pub.Publish("orders", text))
	require.NoError(t, pub.Publish("orders", binary))

	msgs := receive(t, sub, "orders")
	seen := map[string]bool{}
	for _, want := range []*message.Message{text, binary} {
		got := next(t, msgs)
		require.Equal(t, want.UUID, got.UUID)
		require.Equal(t, want.Payload, got.Payload)
		require.NotEmpty(t, got.Metadata.Get(sqs.MetadataMessageID))
		seen[got.Metadata.Get(sqs.MetadataMessageID)] = true
		require.False(t, sqs.SentTime(got).IsZero())
		delete(got.Metadata, sqs.MetadataMessageID)
		delete(got.Metadata, sqs.MetadataSentTimestamp)
		require.Equal(t, want.Metadata, got.Metadata)
		if want == binary {
			require.True(t, got.Nack())
			again := next(t, msgs)
			require.Equal(t, binary.UUID, again.UUID, "a nacked message comes back after NackDelay")
			got = again
		}
		require.True(t, got.Ack())
	}
	require.Len(t, seen, 2, "each message has its own MessageId")
	require.Eventually(t, func() bool { return sqstest.Waiting(t, client, url) == 0 }, 10*time.Second, 10*time.Millisecond,
		"acknowledged messages are deleted")
}

// An outage is told from a refusal. With goaws killed, and with the queue
// missing, Publish fails as an outage (the relay pauses and charges
// nothing), the latter saying to create the queue; a message SQS refuses
// (too large) fails as the message's own failure.
func TestPublishErrors(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, brokertest.GoAWS)
	client := sqstest.Client(srv.URL())
	url := sqstest.CreateQueue(t, client, "orders", 30*time.Second)
	pub, err := sqs.NewPublisher(sqs.PublisherConfig{Client: client})
	require.NoError(t, err)

	err = pub.Publish("missing", message.NewMessage(uuid.NewString(), []byte("{}")))
	require.True(t, relay.IsUnreachable(err), "%v", err)
	require.ErrorContains(t, err, "create the queue")

	big := message.NewMessage(uuid.NewString(), make([]byte, 300*1024))
	err = pub.Publish("orders", big)
	require.Error(t, err)
	require.False(t, relay.IsUnreachable(err), "%v", err)

	require.NoError(t, pub.Publish("orders", message.NewMessage(uuid.NewString(), []byte("{}"))))
	// A queue deleted after the publisher looked its URL up: SendMessage
	// fails with an error the SDK leaves untyped.
	_, err = client.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)})
	require.NoError(t, err)
	err = pub.Publish("orders", message.NewMessage(uuid.NewString(), []byte("{}")))
	require.True(t, relay.IsUnreachable(err), "%v", err)
	require.ErrorContains(t, err, "create the queue")
	sqstest.CreateQueue(t, client, "orders", 30*time.Second)

	require.NoError(t, pub.Publish("orders", message.NewMessage(uuid.NewString(), []byte("{}"))))
	srv.Kill(t)
	err = pub.Publish("orders", message.NewMessage(uuid.NewString(), []byte("{}")))
	require.True(t, relay.IsUnreachable(err), "%v", err)

	require.NoError(t, pub.Close())
	require.ErrorIs(t, pub.Publish("orders", message.NewMessage(uuid.NewString(), []byte("{}"))), relay.ErrPublisherClosed)
}

// To a FIFO queue the publisher sends the outbox id as the
// MessageDeduplicationId: a message the relay publishes again within
// SQS's five-minute window is dropped by SQS, where a standard queue
// holds both copies (and the inbox drops the second).
func TestFIFODeduplicationID(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, brokertest.GoAWS)
	client := sqstest.Client(srv.URL())
	fifo := sqstest.CreateQueue(t, client, "orders.fifo", 30*time.Second)
	standard := sqstest.CreateQueue(t, client, "orders", 30*time.Second)
	pub, err := sqs.NewPublisher(sqs.PublisherConfig{Client: client})
	require.NoError(t, err)

	msg := message.NewMessage(uuid.NewString(), []byte("{}"))
	msg.Metadata.Set(pgbox.MetadataOrderingKey, "customer-1")
	for range 2 {
		require.NoError(t, pub.Publish("orders.fifo", msg))
		require.NoError(t, pub.Publish("orders", msg))
	}
	require.Equal(t, 1, sqstest.Waiting(t, client, fifo))
	require.Equal(t, 2, sqstest.Waiting(t, client, standard))
}

// NewPublisher and NewSubscriber refuse what cannot work, naming the
// field.
func TestConfigRefused(t *testing.T) {
	t.Parallel()
	client := sqstest.Client("http://127.0.0.1:1")
	for _, tc := range []struct {
		cfg  sqs.SubscriberConfig
		want string
	}{
		{sqs.SubscriberConfig{}, "SubscriberConfig.Client is nil"},
		{sqs.SubscriberConfig{Client: client, VisibilityTimeout: 1500 * time.Millisecond}, "VisibilityTimeout is 1.5s"},
		{sqs.SubscriberConfig{Client: client, WaitTime: 21 * time.Second}, "WaitTime is 21s"},
		{sqs.SubscriberConfig{Client: client, ExtendEvery: -2}, "ExtendEvery is -2ns"},
		{sqs.SubscriberConfig{Client: client, NackDelay: 500 * time.Millisecond}, "NackDelay is 500ms"},
	} {
		_, err := sqs.NewSubscriber(tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
	_, err := sqs.NewPublisher(sqs.PublisherConfig{})
	require.ErrorContains(t, err, "PublisherConfig.Client is nil")
	_, err = sqs.NewPublisher(sqs.PublisherConfig{Client: client, Concurrency: -1})
	require.ErrorContains(t, err, "Concurrency is -1")
}

// A foreign producer's message has no pgbox id: the subscriber gives it
// no UUID, and its string and number attributes as metadata, next to its
// MessageId.
func TestForeignMessage(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, brokertest.GoAWS)
	client := sqstest.Client(srv.URL())
	url := sqstest.CreateQueue(t, client, "ledger", 30*time.Second)
	sent, err := client.SendMessage(context.Background(), &awssqs.SendMessageInput{
		QueueUrl:    aws.String(url),
		MessageBody: aws.String(`{"entry":1}`),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"x-event-id": {DataType: aws.String("String"), StringValue: aws.String("e-1")},
			"amount":     {DataType: aws.String("Number"), StringValue: aws.String("12")},
		},
	})
	require.NoError(t, err)
	sub, err := sqs.NewSubscriber(sqs.SubscriberConfig{Client: client, WaitTime: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	got := next(t, receive(t, sub, "ledger"))
	require.Empty(t, got.UUID)
	require.NotEmpty(t, got.Metadata.Get(sqs.MetadataSentTimestamp))
	delete(got.Metadata, sqs.MetadataSentTimestamp)
	require.Equal(t, message.Metadata{"x-event-id": "e-1", "amount": "12", sqs.MetadataMessageID: *sent.MessageId}, got.Metadata)
	require.Equal(t, `{"entry":1}`, string(got.Payload))
	got.Ack()

	require.NoError(t, sub.Close())
	_, err = sub.Subscribe(context.Background(), "ledger")
	require.ErrorContains(t, err, "the subscriber is closed")
}

// The subscriber extends the visibility of the message it holds: while
// the handler has it, unacknowledged, for several of the queue's 1s
// visibility timeouts, no other consumer receives it. Without the
// extension (ExtendEvery -1) another consumer receives it within two.
func TestVisibilityExtended(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, brokertest.GoAWS)
	client := sqstest.Client(srv.URL())
	url := sqstest.CreateQueue(t, client, "slow", time.Second)
	pub, err := sqs.NewPublisher(sqs.PublisherConfig{Client: client})
	require.NoError(t, err)
	msg := message.NewMessage(uuid.NewString(), []byte("{}"))
	require.NoError(t, pub.Publish("slow", msg))
	sub, err := sqs.NewSubscriber(sqs.SubscriberConfig{Client: client})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	held := next(t, receive(t, sub, "slow"))

	// Four long polls of a second each: goaws makes an expired message
	// visible again within a second of its timeout.
	other := func() []types.Message {
		out, err := client.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 1})
		require.NoError(t, err)
		return out.Messages
	}
	for range 4 {
		require.Empty(t, other(), "another consumer received the message held")
	}
	require.True(t, held.Ack())
	require.Eventually(t, func() bool { return sqstest.Waiting(t, client, url) == 0 }, 10*time.Second, 10*time.Millisecond,
		"deleted once acknowledged")
}

// SentTime is the SQS SentTimestamp, the broker's time, which dates a
// MessageId: a foreign message received, nacked and received again keeps
// its MessageId and carries a time no earlier than its send. A pgbox
// message the relay publishes again is a new SQS message, with the same
// UUID but a new MessageId and a later time: the time is fixed with the
// MessageId, never with pgbox's id.
//
// SQS stamps SentTimestamp once, when it takes the message, and gives it
// on every receive. goaws v0.4.5, the stand-in tests run on, stamps it at
// each receive instead (app/gosqs/gosqs.go, getMessageResult): here a
// redelivery's time is checked to lie between the send and the receive,
// not to equal the first's.
func TestSentTime(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, brokertest.GoAWS)
	client := sqstest.Client(srv.URL())
	url := sqstest.CreateQueue(t, client, "ledger", 30*time.Second)
	pub, err := sqs.NewPublisher(sqs.PublisherConfig{Client: client})
	require.NoError(t, err)
	sub, err := sqs.NewSubscriber(sqs.SubscriberConfig{Client: client, NackDelay: -1, WaitTime: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	msgs := receive(t, sub, "ledger")

	// take returns the next message, its SentTime checked to be the
	// broker's: no earlier than sent (to the millisecond SQS stamps), no
	// later than its receive.
	take := func(sent time.Time) *message.Message {
		m := next(t, msgs)
		at := sqs.SentTime(m)
		require.False(t, at.Before(sent.Truncate(time.Millisecond)), "SentTimestamp %s is before the send at %s", at, sent)
		require.False(t, at.After(time.Now()), "SentTimestamp %s is after the receive", at)
		require.NotEmpty(t, m.Metadata.Get(sqs.MetadataMessageID))
		return m
	}

	sent := time.Now()
	_, err = client.SendMessage(context.Background(), &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(`{"entry":1}`)})
	require.NoError(t, err)
	first := take(sent)
	require.True(t, first.Nack())
	again := take(sent)
	require.Equal(t, first.Metadata.Get(sqs.MetadataMessageID), again.Metadata.Get(sqs.MetadataMessageID), "a redelivery keeps its MessageId")
	require.True(t, again.Ack())

	row := message.NewMessage(uuid.Must(uuid.NewV7()).String(), []byte(`{"order":"o-1"}`))
	sent = time.Now()
	require.NoError(t, pub.Publish("ledger", row))
	published := take(sent)
	require.True(t, published.Ack())
	firstAt := sqs.SentTime(published)
	require.Eventually(t, func() bool { return time.Now().Truncate(time.Millisecond).After(firstAt) }, time.Second, time.Millisecond)
	sent = time.Now()
	require.NoError(t, pub.Publish("ledger", row))
	republished := take(sent)
	require.True(t, republished.Ack())
	require.Equal(t, row.UUID, republished.UUID)
	require.NotEqual(t, published.Metadata.Get(sqs.MetadataMessageID), republished.Metadata.Get(sqs.MetadataMessageID), "published again, a new message")
	require.True(t, sqs.SentTime(republished).After(firstAt), "published again, a later time: %s, first %s", sqs.SentTime(republished), firstAt)
}

// PublishResults tells each message's fate apart: of a call of five, the
// one SQS refuses (too large) fails, as its own failure, and the other
// four arrive; with the queue missing, every message fails as an outage.
func TestPublishResults(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, brokertest.GoAWS)
	client := sqstest.Client(srv.URL())
	url := sqstest.CreateQueue(t, client, "orders", time.Second)
	pub, err := sqs.NewPublisher(sqs.PublisherConfig{Client: client, Concurrency: 2})
	require.NoError(t, err)
	sub, err := sqs.NewSubscriber(sqs.SubscriberConfig{Client: client, NackDelay: -1, WaitTime: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })

	msgs := make([]*message.Message, 5)
	for i := range msgs {
		msgs[i] = message.NewMessage(uuid.NewString(), []byte("{}"))
	}
	msgs[2].Payload = make([]byte, 300*1024)
	errs := pub.PublishResults("orders", msgs...)
	require.Len(t, errs, 5)
	for i, err := range errs {
		if i == 2 {
			require.Error(t, err)
			require.False(t, relay.IsUnreachable(err), "%v", err)
			continue
		}
		require.NoError(t, err, "message %d", i)
	}
	err = pub.Publish("orders", msgs...)
	require.ErrorContains(t, err, "1 of 5 messages")
	require.False(t, relay.IsUnreachable(err), "%v", err)

	require.Equal(t, 8, sqstest.Waiting(t, client, url), "each of the four good messages, from both calls")
	got := map[string]bool{}
	arrived := receive(t, sub, "orders")
	for len(got) < 4 { // a receive whose answer is lost hides its messages for the queue's visibility timeout, 1s
		m := next(t, arrived)
		got[m.UUID] = true
		require.True(t, m.Ack())
	}
	require.Equal(t, map[string]bool{msgs[0].UUID: true, msgs[1].UUID: true, msgs[3].UUID: true, msgs[4].UUID: true}, got)

	for _, err := range pub.PublishResults("missing", msgs[0], msgs[1]) {
		require.True(t, relay.IsUnreachable(err), "%v", err)
	}
}
