package test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pgbox/pgbox/googlepubsub"
)

// TestPubSub runs pgbox through Google Cloud Pub/Sub (package
// googlepubsub) against pstest, the Go client's in-process fake, each
// subtest on topics of its own.
func TestPubSub(t *testing.T) {
	t.Parallel()
	srv := pstest.NewServer()
	t.Cleanup(func() { _ = srv.Close() })
	t.Run("EndToEnd", func(t *testing.T) {
		t.Parallel()
		runEndToEnd(t, pubsubBroker(t, srv.Addr, "e2e", pubsub.ReceiveSettings{}, googlepubsub.PublisherConfig{}))
	})
	t.Run("OrderingKeys", func(t *testing.T) {
		t.Parallel()
		runPubSubOrdering(t, srv.Addr)
	})
	t.Run("AnAckDeadlineExpiresDuringASlowStore", func(t *testing.T) {
		t.Parallel()
		runPubSubAckDeadline(t, srv.Addr)
	})
	// pstest keeps nothing across a restart, so the outage is the network
	// to it cut, publisher and subscriber alike, and restored. The client
	// retries a publish while Pub/Sub is unreachable until PublishTimeout,
	// here 2s to keep the test short; gRPC waits at most a second between
	// reconnects, so the relay finds it back soon after.
	t.Run("Outage", func(t *testing.T) {
		t.Parallel()
		proxy := newCutProxy(t, srv.Addr)
		runBrokerOutage(t, proxy, pubsubBroker(t, proxy.Addr(), "outage", pubsub.ReceiveSettings{},
			googlepubsub.PublisherConfig{PublishTimeout: 2 * time.Second},
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, MaxDelay: time.Second}})))
	})
}

// pubsubBroker creates a topic named after name (with a suffix of the
// test's own) on the Pub/Sub at addr, and the payments consumer's
// subscription to it, with message ordering on, and returns
// googlepubsub's publisher and subscriber (receiving with settings) on
// them, publishing with publish, and dialled with dial.
func pubsubBroker(t testing.TB, addr, name string, settings pubsub.ReceiveSettings, publish googlepubsub.PublisherConfig, dial ...grpc.DialOption) broker {
	t.Helper()
	ctx := context.Background()
	conn, err := grpc.NewClient(addr, append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	client, err := pubsub.NewClient(ctx, "pgbox", option.WithGRPCConn(conn))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })

	topic := "orders_" + name + "_" + uuid.NewString()[:8]
	subscription := func(topic string) string { return topic + ".payments" }
	_, err = client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/pgbox/topics/" + topic})
	require.NoError(t, err)
	_, err = client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name:                  "projects/pgbox/subscriptions/" + subscription(topic),
		Topic:                 "projects/pgbox/topics/" + topic,
		AckDeadlineSeconds:    10,
		EnableMessageOrdering: true,
	})
	require.NoError(t, err)

	pub := googlepubsub.NewPublisher(client, publish)
	sub, err := googlepubsub.NewSubscriber(client, googlepubsub.SubscriberConfig{Subscription: subscription, ReceiveSettings: settings})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
	return broker{publisher: pub, subscriber: sub, topic: topic}
}

// Each customer's orders, placed one after the other and published under
// the customer as ordering key, are paid in the order they were placed:
// the publisher carries pgbox's ordering key as Pub/Sub's, and Pub/Sub
// delivers one key's messages one at a time, in order, though the
// consumer's router stores whatever it is handed concurrently.
func runPubSubOrdering(t *testing.T, addr string) {
	const customers, orders = 8, 160
	b := pubsubBroker(t, addr, "ordered", pubsub.ReceiveSettings{}, googlepubsub.PublisherConfig{})
	p := newProducer(t, b.topic)
	c := startConsumer(t, b)
	p.startRelay(t, b.publisher)
	for i := range orders {
		p.place(t, order{ID: orderID(i), Cents: i}, fmt.Sprintf("customer-%02d", i%customers), true)
	}
	waitPublished(t, p)
	c.waitSettled(t, 2*orders, orders) // each delivery twice (Duplicator)
	requirePaidOncePerKeyInOrder(t, c, orders, customers)
}

// requirePaidOncePerKeyInOrder requires that each of orders orders was
// paid once, and each of keys ordering keys' orders in the order placed
// (their ids ascending).
func requirePaidOncePerKeyInOrder(t *testing.T, c *consumer, orders, keys int) {
	t.Helper()
	payments := c.paymentsPerOrder(t)
	require.Len(t, payments, orders)
	for id, n := range payments {
		require.Equal(t, 1, n, "order %s must be paid exactly once", id)
	}
	rows, err := c.pool.Query(context.Background(), c.sql("SELECT ordering_key, order_id FROM /* schema */payments ORDER BY seq"))
	require.NoError(t, err)
	defer rows.Close() // a failure below would otherwise keep its connection, and the pool's Close would wait for it
	last := map[string]string{}
	for rows.Next() {
		var key, id string
		require.NoError(t, rows.Scan(&key, &id))
		require.Greater(t, id, last[key], "key %s: %s paid after %s", key, id, last[key])
		last[key] = id
	}
	require.NoError(t, rows.Err())
	require.Len(t, last, keys)
}

// slowFirst is a subscriber whose first message's store is slow: it
// holds that delivery back from the handler until Pub/Sub, the message's
// ack deadline passed, has delivered it again and the handler has
// acknowledged the second delivery; then it hands over the first.
type slowFirst struct {
	message.Subscriber
	mu         sync.Mutex
	id         string // the first message's UUID
	deliveries atomic.Int64
}

func (s *slowFirst) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := s.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		var held *message.Message
		for m := range in {
			s.mu.Lock()
			if s.id == "" {
				s.id = m.UUID
			}
			first := m.UUID == s.id
			s.mu.Unlock()
			if first {
				s.deliveries.Add(1)
			}
			if first && held == nil {
				held = m
				continue
			}
			out <- m
			if first {
				select {
				case <-m.Acked():
				case <-m.Nacked():
				case <-ctx.Done():
				}
				out <- held
			}
		}
	}()
	return out, nil
}

// A message whose store outlasts its ack deadline (the client extends it
// for MaxExtension only, here not at all) is delivered again by Pub/Sub
// while the first delivery is still in hand: the second is stored and
// acknowledged, the first then finds it stored, a duplicate, and the order
// is paid once. The Go client acknowledges on receipt for 10 seconds at
// least, so the redelivery takes that long.
func runPubSubAckDeadline(t *testing.T, addr string) {
	const orders = 20
	b := pubsubBroker(t, addr, "deadline", pubsub.ReceiveSettings{MaxExtension: -1}, googlepubsub.PublisherConfig{})
	slow := &slowFirst{Subscriber: b.subscriber}
	b.subscriber = slow
	p := newProducer(t, b.topic)
	c := startConsumer(t, b)
	p.startRelay(t, b.publisher)
	for i := range orders {
		p.place(t, order{ID: orderID(i), Cents: i}, "", true)
	}
	waitPublished(t, p)
	c.waitSettled(t, 2*(orders+1), orders) // the first twice, each delivery twice (Duplicator)
	require.EqualValues(t, 2, slow.deliveries.Load(), "the slow message was delivered again")
	payments := c.paymentsPerOrder(t)
	require.Len(t, payments, orders)
	for id, n := range payments {
		require.Equal(t, 1, n, "order %s must be paid exactly once", id)
	}
	var stored int
	require.NoError(t, c.pool.QueryRow(context.Background(), c.sql("SELECT count(*) FROM /* schema */inbox WHERE message_id = $1"), slow.id).Scan(&stored))
	require.Equal(t, 1, stored)
}
