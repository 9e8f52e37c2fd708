package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/brokertest"
	"github.com/pgbox/pgbox/watermillinbox"
)

// TestRedis runs pgbox through Redis Streams (Debian's redis-server, one
// of the test's own, scripts/redis.sh) and watermill-redisstream, a
// consumer group reading each stream. Its subtests share the server, one
// after the other; the outage, which kills it, comes last.
func TestRedis(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, brokertest.Redis)
	t.Run("EndToEnd", func(t *testing.T) { runEndToEnd(t, redisBroker(t, srv.URL(), "orders_e2e", "b")) })
	t.Run("AKilledConsumersPendingEntriesAreClaimed", func(t *testing.T) { runRedisClaim(t, srv.URL()) })
	t.Run("Outage", func(t *testing.T) { runBrokerOutage(t, srv, redisBroker(t, srv.URL(), "orders_outage", "b")) })
}

// Redis Streams claim settings for the tests: an entry another consumer
// of the group has held unacknowledged for redisMaxIdle is taken over, and
// the subscriber looks for such entries every redisClaimInterval.
// watermill-redisstream's defaults, 60s and 5s, would outlast a test.
const (
	redisClaimInterval = 100 * time.Millisecond
	redisMaxIdle       = time.Second
)

// redisClient connects to the Redis server at url, closed with the test.
func redisClient(t testing.TB, url string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// redisSubscriber is consumer consumer of the "payments" group, on a
// client of its own (closing the subscriber closes it).
func redisSubscriber(t testing.TB, url, consumer string) *redisstream.Subscriber {
	t.Helper()
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client:        redisClient(t, url),
		ClaimInterval: redisClaimInterval,
		Consumer:      consumer,
		ConsumerGroup: "payments",
		// Without it, the first read blocks in Redis until an entry comes,
		// and a subscriber closed before then leaves it behind.
		DisableIndefiniteInitialBlock: true,
		MaxIdleTime:                   redisMaxIdle,
	}, watermillLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// redisBroker is watermill-redisstream on the Redis server at url: the
// stream is topic (with a suffix of the test's own), read by consumer
// consumer of the "payments" group.
func redisBroker(t testing.TB, url, topic, consumer string) broker {
	t.Helper()
	topic += "_" + uuid.NewString()[:8]
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: redisClient(t, url)}, watermillLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = pub.Close()
		_ = redisClient(t, url).Del(context.Background(), topic).Err()
	})
	return broker{publisher: pub, subscriber: redisSubscriber(t, url, consumer), topic: topic}
}

// A consumer of the group killed with entries delivered and not
// acknowledged leaves them in the group's pending entries list, one of
// them already stored in the inbox (it died between the commit and the
// ack). Another consumer of the group claims them once they have been idle
// for MaxIdleTime: each is handled once, the stored one a duplicate to the
// inbox, and nothing is left pending. (Consumer a is a subscriber closed
// without acknowledging: Redis holds the same state for it as for a
// SIGKILLed process, entries pending under a consumer that never reads
// again.)
func runRedisClaim(t *testing.T, url string) {
	ctx := context.Background()
	b := redisBroker(t, url, "orders_claim", "b")
	rdb := redisClient(t, url)
	pendingOf := func(consumer string) int64 {
		p, err := rdb.XPending(ctx, b.topic, "payments").Result()
		require.NoError(t, err)
		return p.Consumers[consumer]
	}

	// Consumer a joins the group first and reads the first entries: one
	// in its hands, and the ones its subscriber has read ahead.
	a := redisSubscriber(t, url, "a")
	aCtx, cancelA := context.WithCancel(ctx)
	defer cancelA()
	fromA, err := a.Subscribe(aCtx, b.topic)
	require.NoError(t, err)
	p := newProducer(t, b.topic)
	p.startRelay(t, b.publisher)
	const orders = 40
	for i := range orders {
		p.place(t, order{ID: orderID(i), Cents: i}, fmt.Sprintf("customer-%d", i%5), true)
	}
	held := <-fromA
	require.Eventually(t, func() bool { return pendingOf("a") >= 2 }, time.Minute, 10*time.Millisecond,
		"consumer a reads ahead of the entry in its hands: its entries are pending under its name")
	waitPublished(t, p)

	// Consumer b starts and reads the rest; a stores the entry it holds
	// and dies before acknowledging it. (b may claim a's entries as soon
	// as they have been idle for MaxIdleTime, before a dies or even before
	// a stores the one it holds: a slow consumer's entries are claimed
	// like a dead one's. Each is handled once all the same.)
	c := startConsumer(t, b)
	require.NoError(t, watermillinbox.Handler(watermillinbox.Config{Inbox: c.inbox})(held))
	require.NoError(t, a.Close())

	c.waitSettled(t, 2*orders, orders) // each delivery twice (Duplicator)
	payments := c.paymentsPerOrder(t)
	require.Len(t, payments, orders)
	for id, n := range payments {
		require.Equal(t, 1, n, "order %s must be paid exactly once", id)
	}
	require.Eventually(t, func() bool {
		p, err := rdb.XPending(ctx, b.topic, "payments").Result()
		require.NoError(t, err)
		return p.Count == 0
	}, time.Minute, 10*time.Millisecond, "every entry acknowledged, a's claimed by b")
	var stored int
	require.NoError(t, c.pool.QueryRow(ctx, c.sql("SELECT count(*) FROM /* schema */inbox WHERE message_id = $1"), held.UUID).Scan(&stored))
	require.Equal(t, 1, stored)
}
