package googlepubsub_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/googlepubsub"
	"github.com/pgbox/pgbox/relay"
)

// fake starts pstest, the Pub/Sub client's in-process fake, and returns a
// client on it; both end with the test.
func fake(tb testing.TB) (*pstest.Server, *pubsub.Client) {
	tb.Helper()
	srv := pstest.NewServer()
	tb.Cleanup(func() { _ = srv.Close() })
	return srv, client(tb, srv.Addr)
}

func client(tb testing.TB, addr string) *pubsub.Client {
	tb.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(tb, err)
	c, err := pubsub.NewClient(context.Background(), "pgbox", option.WithGRPCConn(conn))
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = c.Close(); _ = conn.Close() })
	return c
}

func keyed(key string) *message.Message {
	m := message.NewMessage(fmt.Sprintf("id-%d", time.Now().UnixNano()), []byte(`{}`))
	m.Metadata.Set(pgbox.MetadataOrderingKey, key)
	return m
}

// A publish that fails pauses its ordering key in the Pub/Sub client,
// which then refuses every later publish of the key: the relay's retry of
// the row would fail for ever. The publisher resumes the key, and the
// retry goes out. The failure (a topic not yet created) is the message's,
// not an outage.
func TestPublisherResumesAnOrderingKeyAfterAFailure(t *testing.T) {
	t.Parallel()
	_, c := fake(t)
	pub := googlepubsub.NewPublisher(c, googlepubsub.PublisherConfig{})
	t.Cleanup(func() { _ = pub.Close() })

	err := pub.Publish("late", keyed("customer-1"))
	require.ErrorContains(t, err, "googlepubsub: publish message")
	require.False(t, relay.IsUnreachable(err), "a refusal, not an outage: %v", err)

	_, err = c.TopicAdminClient.CreateTopic(context.Background(), &pubsubpb.Topic{Name: "projects/pgbox/topics/late"})
	require.NoError(t, err)
	require.NoError(t, pub.Publish("late", keyed("customer-1")), "the key was resumed")

	require.NoError(t, pub.Close())
	require.ErrorIs(t, pub.Publish("late", keyed("customer-1")), relay.ErrPublisherClosed)
}

// While Pub/Sub cannot be reached, a publish fails within PublishTimeout
// with an error the relay takes for an outage.
func TestPublisherReportsAnOutage(t *testing.T) {
	t.Parallel()
	srv, c := fake(t)
	_, err := c.TopicAdminClient.CreateTopic(context.Background(), &pubsubpb.Topic{Name: "projects/pgbox/topics/orders"})
	require.NoError(t, err)
	pub := googlepubsub.NewPublisher(c, googlepubsub.PublisherConfig{PublishTimeout: time.Second})
	t.Cleanup(func() { _ = pub.Close() })
	require.NoError(t, pub.Publish("orders", keyed("customer-1")))

	require.NoError(t, srv.Close())
	err = pub.Publish("orders", keyed("customer-1"))
	require.ErrorIs(t, err, relay.ErrBrokerUnreachable)
	require.True(t, relay.IsUnreachable(err))
}

// A subscriber for a subscription that does not exist says so, and what to
// do, when it subscribes.
func TestSubscriberNamesAMissingSubscription(t *testing.T) {
	t.Parallel()
	_, c := fake(t)
	sub, err := googlepubsub.NewSubscriber(c, googlepubsub.SubscriberConfig{Subscription: func(topic string) string { return topic + ".payments" }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	_, err = sub.Subscribe(context.Background(), "orders")
	require.ErrorContains(t, err, "googlepubsub: subscription projects/pgbox/subscriptions/orders.payments for topic orders")
	require.ErrorContains(t, err, "create it, on the topic, before the relay publishes")

	_, err = googlepubsub.NewSubscriber(c, googlepubsub.SubscriberConfig{})
	require.ErrorContains(t, err, "SubscriberConfig.Subscription is required")
}

// A message goes through Pub/Sub under its Watermill UUID, with its
// metadata and pgbox's ordering key, which is Pub/Sub's too.
func Example() {
	ctx := context.Background()
	srv := pstest.NewServer()
	defer func() { _ = srv.Close() }()
	conn, _ := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer func() { _ = conn.Close() }()
	client, _ := pubsub.NewClient(ctx, "shop", option.WithGRPCConn(conn))
	defer func() { _ = client.Close() }()

	// The topic, and the consumer's subscription, exist before anything is
	// published: Pub/Sub drops what reaches a topic with no subscription.
	_, _ = client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/shop/topics/orders"})
	_, _ = client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: "projects/shop/subscriptions/orders.payments", Topic: "projects/shop/topics/orders", EnableMessageOrdering: true,
	})

	// The relay's publisher: relay.Config{Publisher: pub}.
	pub := googlepubsub.NewPublisher(client, googlepubsub.PublisherConfig{})
	defer func() { _ = pub.Close() }()
	m := message.NewMessage("0193a5e4-7c1d-7000-8000-000000000001", []byte(`{"order":"o-1"}`))
	m.Metadata.Set(pgbox.MetadataEventType, "OrderPlaced")
	m.Metadata.Set(pgbox.MetadataOrderingKey, "customer-7")
	if err := pub.Publish("orders", m); err != nil {
		fmt.Println(err)
		return
	}

	// The consumer's subscriber, for watermillinbox.Handler in a router.
	sub, _ := googlepubsub.NewSubscriber(client, googlepubsub.SubscriberConfig{
		Subscription: func(topic string) string { return topic + ".payments" },
	})
	defer func() { _ = sub.Close() }()
	msgs, err := sub.Subscribe(ctx, "orders")
	if err != nil {
		fmt.Println(err)
		return
	}
	got := <-msgs
	fmt.Println(got.UUID, got.Metadata.Get(pgbox.MetadataEventType), got.Metadata.Get(pgbox.MetadataOrderingKey), string(got.Payload))
	got.Ack()
	// Output: 0193a5e4-7c1d-7000-8000-000000000001 OrderPlaced customer-7 {"order":"o-1"}
}

// PublishTime is Pub/Sub's publish time, which dates the message ID: a
// foreign message nacked and delivered again keeps its message ID and
// publish time, a time no earlier than the publish. A pgbox message the
// relay publishes again is a new Pub/Sub message, with the same UUID but a
// new message ID and a later time: the time is fixed with the message ID,
// never with pgbox's id.
func TestPublishTime(t *testing.T) {
	t.Parallel()
	_, c := fake(t)
	ctx := context.Background()
	_, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/pgbox/topics/ledger"})
	require.NoError(t, err)
	_, err = c.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: "projects/pgbox/subscriptions/ledger.payments", Topic: "projects/pgbox/topics/ledger",
	})
	require.NoError(t, err)
	sub, err := googlepubsub.NewSubscriber(c, googlepubsub.SubscriberConfig{Subscription: func(topic string) string { return topic + ".payments" }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	subCtx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	msgs, err := sub.Subscribe(subCtx, "ledger")
	require.NoError(t, err)

	// A foreign producer: the Pub/Sub client, no Watermill UUID.
	producer := c.Publisher("ledger")
	t.Cleanup(producer.Stop)
	next := func() *message.Message {
		select {
		case m := <-msgs:
			return m
		case <-time.After(30 * time.Second):
			t.Fatal("no message within 30s")
			return nil
		}
	}

	published := time.Now()
	id, err := producer.Publish(ctx, &pubsub.Message{Data: []byte(`{"entry":1}`)}).Get(ctx)
	require.NoError(t, err)
	first := next()
	require.Empty(t, first.UUID)
	require.Equal(t, id, first.Metadata.Get(googlepubsub.MetadataMessageID))
	at := googlepubsub.PublishTime(first)
	require.False(t, at.Before(published), "publish time %s is before the publish at %s", at, published)
	require.False(t, at.After(time.Now()), "publish time %s is after the delivery", at)
	require.True(t, first.Nack())

	again := next()
	require.Equal(t, id, again.Metadata.Get(googlepubsub.MetadataMessageID), "a redelivery keeps its message ID")
	require.Equal(t, at, googlepubsub.PublishTime(again), "and its publish time")
	require.True(t, again.Ack())

	// The relay publishing a row again: the same UUID, a new message.
	pub := googlepubsub.NewPublisher(c, googlepubsub.PublisherConfig{})
	t.Cleanup(func() { _ = pub.Close() })
	row := message.NewMessage("0193a5e4-7c1d-7000-8000-000000000001", []byte(`{"order":"o-1"}`))
	require.NoError(t, pub.Publish("ledger", row))
	published1 := next()
	require.True(t, published1.Ack())
	at1 := googlepubsub.PublishTime(published1)
	require.Eventually(t, func() bool { return time.Now().After(at1) }, time.Second, time.Millisecond)
	require.NoError(t, pub.Publish("ledger", row))
	published2 := next()
	require.True(t, published2.Ack())
	require.Equal(t, row.UUID, published2.UUID)
	require.NotEqual(t, published1.Metadata.Get(googlepubsub.MetadataMessageID), published2.Metadata.Get(googlepubsub.MetadataMessageID),
		"published again, a new message")
	require.True(t, googlepubsub.PublishTime(published2).After(at1), "published again, a later time")
}

// A message ID is dated by the publish time Pub/Sub gives the message,
// which the subscriber carries in the metadata and PublishTime reads. For
// watermillinbox, a subscription of foreign messages is deduped on the
// pair:
//
//	watermillinbox.Config{
//		IDFunc:     watermillinbox.UUIDOr(watermillinbox.MetadataID(googlepubsub.MetadataMessageID)),
//		IDTimeFunc: googlepubsub.PublishTime,
//	}
func ExamplePublishTime() {
	// As the subscriber hands over a message Pub/Sub took at 14:40 UTC.
	m := message.NewMessage("", []byte(`{"entry":1}`))
	m.Metadata.Set(googlepubsub.MetadataMessageID, "12345678901234")
	m.Metadata.Set(googlepubsub.MetadataPublishTime, "2026-11-27T14:40:00.123456Z")
	fmt.Println(googlepubsub.PublishTime(m))

	// No publish time: undated.
	fmt.Println(googlepubsub.PublishTime(message.NewMessage("", nil)).IsZero())
	// Output:
	// 2026-11-27 14:40:00.123456 +0000 UTC
	// true
}

// PublishResults gives each message of a call its own outcome: the ones
// Pub/Sub stored are nil, and stored; one the client refuses (larger than
// a publish request can be) fails alone, as a refusal, not an outage. While Pub/Sub cannot be reached,
// each message fails as an outage.
func TestPublishResultsPerMessage(t *testing.T) {
	t.Parallel()
	srv, c := fake(t)
	_, err := c.TopicAdminClient.CreateTopic(context.Background(), &pubsubpb.Topic{Name: "projects/pgbox/topics/orders"})
	require.NoError(t, err)
	pub := googlepubsub.NewPublisher(c, googlepubsub.PublisherConfig{PublishTimeout: time.Second})
	t.Cleanup(func() { _ = pub.Close() })

	msgs := make([]*message.Message, 10)
	for i := range msgs {
		msgs[i] = message.NewMessage(fmt.Sprintf("id-%d", i), []byte(`{}`))
		if i%3 != 0 { // the others unkeyed
			msgs[i].Metadata.Set(pgbox.MetadataOrderingKey, fmt.Sprintf("customer-%d", i))
		}
	}
	const gone = 4
	msgs[gone].Payload = make([]byte, pubsub.MaxPublishRequestBytes)
	errs := pub.PublishResults("orders", msgs...)
	require.Len(t, errs, len(msgs))
	want := map[string]bool{}
	for i, err := range errs {
		if i == gone {
			require.ErrorContains(t, err, msgs[i].UUID)
			require.False(t, relay.IsUnreachable(err), "a refusal, not an outage: %v", err)
			continue
		}
		require.NoError(t, err, "message %d", i)
		want[msgs[i].UUID] = true
	}
	got := map[string]bool{}
	for _, m := range srv.Messages() {
		got[m.Attributes[googlepubsub.UUIDAttribute]] = true
	}
	require.Equal(t, want, got, "every message reported published is stored, and no other")

	require.NoError(t, srv.Close())
	for i, err := range pub.PublishResults("orders", keyed("customer-1"), keyed("customer-2")) {
		require.True(t, relay.IsUnreachable(err), "message %d: %v", i, err)
	}
}

// refuser is a pstest reactor that refuses, as the real Pub/Sub refuses a
// request with a message it finds invalid, every publish request that
// holds a message with the attribute "refuse".
type refuser struct{}

func (refuser) React(req any) (bool, any, error) {
	for _, m := range req.(*pubsubpb.PublishRequest).GetMessages() {
		if _, ok := m.GetAttributes()["refuse"]; ok {
			return true, nil, status.Error(codes.InvalidArgument, "an attribute is invalid")
		}
	}
	return false, nil, nil
}

// A request the server refuses fails every message bundled in it; the
// messages of a PublishResults call it held go again alone, so that only
// the message at fault fails, and every other is stored once.
func TestPublishResultsRetriesARefusedBundleAlone(t *testing.T) {
	t.Parallel()
	srv := pstest.NewServer(pstest.ServerReactorOption{FuncName: "Publish", Reactor: refuser{}})
	t.Cleanup(func() { _ = srv.Close() })
	c := client(t, srv.Addr)
	_, err := c.TopicAdminClient.CreateTopic(context.Background(), &pubsubpb.Topic{Name: "projects/pgbox/topics/orders"})
	require.NoError(t, err)
	pub := googlepubsub.NewPublisher(c, googlepubsub.PublisherConfig{PublishTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = pub.Close() })

	msgs := make([]*message.Message, 6) // unkeyed: bundled in one request
	for i := range msgs {
		msgs[i] = message.NewMessage(fmt.Sprintf("id-%d", i), []byte(`{}`))
	}
	const refused = 3
	msgs[refused].Metadata.Set("refuse", "yes")
	errs := pub.PublishResults("orders", msgs...)
	want := map[string]int{}
	for i, err := range errs {
		if i == refused {
			require.ErrorContains(t, err, "an attribute is invalid")
			require.False(t, relay.IsUnreachable(err), "a refusal, not an outage: %v", err)
			continue
		}
		require.NoError(t, err, "message %d", i)
		want[msgs[i].UUID] = 1
	}
	got := map[string]int{}
	for _, m := range srv.Messages() {
		got[m.Attributes[googlepubsub.UUIDAttribute]]++
	}
	require.Equal(t, want, got, "every message reported published is stored once, and no other")
}
