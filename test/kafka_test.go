package test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/IBM/sarama"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	gometrics "github.com/rcrowley/go-metrics"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/kafka"
	"github.com/pgbox/pgbox/relay"
)

// sarama's metrics start a process-wide goroutine that never ends, which
// the leak check after the tests would report: the tests keep none.
func init() { gometrics.UseNilMetrics = true }

// Orders flow outbox → relay → Kafka → inbox → dispatcher through
// watermill-kafka (sarama) against kfake, franz-go's in-process
// Kafka-protocol broker, on a topic of 4 partitions, with the relay
// replaced halfway: every order is paid once, each customer's orders are
// paid in the order they were placed, each customer's records are on one
// partition, and the customers spread over several.
func TestKafka(t *testing.T) {
	t.Parallel()
	const topic, partitions, customers, orders = "orders", 4, 12, 360
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()

	logger := watermillLogger(t)
	pub, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{Brokers: brokers, Marshaler: kafka.Marshaler()}, logger)
	require.NoError(t, err)
	saramaCfg := wmkafka.DefaultSaramaSubscriberConfig()
	saramaCfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	sub, err := wmkafka.NewSubscriber(wmkafka.SubscriberConfig{
		Brokers:               brokers,
		ConsumerGroup:         "payments",
		OverwriteSaramaConfig: saramaCfg,
		Unmarshaler:           kafka.Marshaler(),
	}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close(); _ = sub.Close() })
	p := newProducer(t, topic)
	c := startConsumer(t, broker{publisher: pub, subscriber: sub, topic: topic})

	quiet := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	customer := func(i int) string { return fmt.Sprintf("customer-%02d", i%customers) }
	first := p.startRelayWith(t, relay.Config{Logger: quiet, Publisher: pub})
	for i := range orders / 2 {
		p.place(t, order{ID: orderID(i), Cents: i}, customer(i), true)
	}
	require.Eventually(t, func() bool { return publishedRows(t, p) >= orders/4 }, time.Minute, 5*time.Millisecond)
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, first.Stop(stopCtx))
	p.startRelayWith(t, relay.Config{Logger: quiet, Publisher: pub})
	for i := orders / 2; i < orders; i++ {
		p.place(t, order{ID: orderID(i), Cents: i}, customer(i), true)
	}
	waitPublished(t, p)
	c.waitSettled(t, 2*orders, orders)

	payments := c.paymentsPerOrder(t)
	require.Len(t, payments, orders)
	for id, n := range payments {
		require.Equal(t, 1, n, "order %s must be paid exactly once", id)
	}
	rows, err := c.pool.Query(context.Background(), ident.Render("SELECT ordering_key, order_id FROM /* schema */payments ORDER BY seq", c.schema))
	require.NoError(t, err)
	last := map[string]string{}
	for rows.Next() {
		var key, id string
		require.NoError(t, rows.Scan(&key, &id))
		require.Greater(t, id, last[key], "customer %s: %s paid after %s", key, id, last[key])
		last[key] = id
	}
	require.NoError(t, rows.Err())
	require.Len(t, last, customers)

	// Read the topic back with another client: each customer on one
	// partition, the customers on several, each record under its outbox id.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	onPartition := map[string]map[int32]bool{}
	used := map[int32]bool{}
	ids := map[string]bool{}
	ctx, cancelPoll := context.WithTimeout(context.Background(), time.Minute)
	defer cancelPoll()
	for len(ids) < orders {
		fetches := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %d of %d records", len(ids), orders)
		fetches.EachRecord(func(r *kgo.Record) {
			key := string(r.Key)
			if onPartition[key] == nil {
				onPartition[key] = map[int32]bool{}
			}
			onPartition[key][r.Partition] = true
			used[r.Partition] = true
			for _, h := range r.Headers {
				if h.Key == wmkafka.UUIDHeaderKey {
					ids[string(h.Value)] = true
				}
			}
		})
	}
	require.Len(t, onPartition, customers)
	for key, ps := range onPartition {
		require.Len(t, ps, 1, "customer %s on partitions %v", key, ps)
	}
	require.Greater(t, len(used), 1, "the customers spread over the partitions")
	var outboxIDs int
	require.NoError(t, p.pool.QueryRow(context.Background(), ident.Render(
		"SELECT count(*) FROM /* schema */outbox WHERE id::text = ANY($1)", p.schema), keys(ids)).Scan(&outboxIDs))
	require.Equal(t, orders, outboxIDs, "each record carries its outbox row's id")
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
