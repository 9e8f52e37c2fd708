package test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	gometrics "github.com/rcrowley/go-metrics"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/kafka"
	"github.com/pgbox/pgbox/relay"
	"github.com/pgbox/pgbox/watermillinbox"
)

// sarama's metrics start a process-wide goroutine that never ends, which
// the leak check after the tests would report: the tests keep none.
func init() { gometrics.UseNilMetrics = true }

// Orders flow outbox → relay → Kafka → inbox → dispatcher against kfake,
// franz-go's in-process Kafka-protocol broker, on a topic of 4
// partitions, with the relay replaced halfway, published by
// watermill-kafka's publisher (sarama) or by kafka.FranzPublisher, and
// read by watermill-kafka's subscriber: every order is paid once, each
// customer's orders are paid in the order they were placed, each
// customer's records are on one partition, and the customers spread over
// several.
func TestKafka(t *testing.T) {
	t.Parallel()
	for name, publisher := range map[string]func(t *testing.T, kb broker, brokers []string) message.Publisher{
		"watermill-kafka": func(_ *testing.T, kb broker, _ []string) message.Publisher { return kb.publisher },
		"FranzPublisher": func(t *testing.T, _ broker, brokers []string) message.Publisher {
			client, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
			require.NoError(t, err)
			t.Cleanup(client.Close)
			pub, err := kafka.NewFranzPublisher(kafka.FranzConfig{Client: client})
			require.NoError(t, err)
			return pub
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testKafkaOrders(t, publisher)
		})
	}
}

func testKafkaOrders(t *testing.T, publisher func(t *testing.T, kb broker, brokers []string) message.Publisher) {
	const topic, partitions, customers, orders = "orders", 4, 12, 360
	kb, brokers := kafkaBroker(t, topic, partitions)
	pub := publisher(t, kb, brokers)
	p := newProducer(t, topic)
	c := startConsumer(t, kb)

	quiet := slog.New(slog.NewTextHandler(logtest.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
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

	requirePaidOncePerKeyInOrder(t, c, orders, customers)

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

// ackLost is a publisher whose broker takes the listed messages but whose
// answer is lost, the first time: the relay, told the publish failed,
// publishes the message again, as it does after any failure it cannot
// tell from a loss (a lease expired, a publish that hung).
type ackLost struct {
	message.Publisher
	mu   sync.Mutex
	lose map[string]bool // ids whose first answer is lost
}

func (p *ackLost) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		if p.lose[m.UUID] {
			delete(p.lose, m.UUID)
			return fmt.Errorf("kafka: no answer for message %s", m.UUID)
		}
	}
	return nil
}

// A message the relay publishes again (same outbox id) is a new Kafka
// record, at a new offset: the consumer's inbox recognises it by the
// Watermill UUID header, the outbox id, and the order is paid once. A
// consumer deduping on topic, partition and offset would pay it twice.
func TestKafkaRepublishIsDedupedByOutboxID(t *testing.T) {
	t.Parallel()
	const topic, orders = "orders", 30
	kb, brokers := kafkaBroker(t, topic, 2)
	p := newProducer(t, topic)
	c := startConsumer(t, kb)

	var ids []string
	for i := range orders {
		ids = append(ids, p.place(t, order{ID: orderID(i), Cents: i}, fmt.Sprintf("customer-%d", i%4), true).String())
	}
	pub := &ackLost{Publisher: kb.publisher, lose: map[string]bool{}}
	again := map[string]bool{}
	for i := 0; i < orders; i += 3 {
		pub.lose[ids[i]], again[ids[i]] = true, true
	}
	quiet := slog.New(slog.NewTextHandler(logtest.Output(t), &slog.HandlerOptions{Level: slog.LevelError}))
	p.startRelayWith(t, relay.Config{Logger: quiet, Publisher: pub})
	waitPublished(t, p)
	c.waitSettled(t, 2*int64(orders+len(again)), orders) // each delivery twice (Duplicator)

	// The topic holds each republished message twice, at two offsets.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	offsets := map[string][]string{} // outbox id → partition/offset of each record
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for records := 0; records < orders+len(again); {
		fetches := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %d of %d records", records, orders+len(again))
		fetches.EachRecord(func(r *kgo.Record) {
			records++
			for _, h := range r.Headers {
				if h.Key == wmkafka.UUIDHeaderKey {
					offsets[string(h.Value)] = append(offsets[string(h.Value)], fmt.Sprintf("%d/%d", r.Partition, r.Offset))
				}
			}
		})
	}
	require.Len(t, offsets, orders)
	for id, at := range offsets {
		if again[id] {
			require.Len(t, at, 2, "message %s published again", id)
			require.NotEqual(t, at[0], at[1], "a new record, at a new offset")
		} else {
			require.Len(t, at, 1, "message %s published once", id)
		}
	}

	// The inbox holds each outbox id once, and each order is paid once.
	var stored int
	require.NoError(t, c.pool.QueryRow(context.Background(), c.sql("SELECT count(*) FROM /* schema */inbox WHERE message_id = ANY($1)"), ids).Scan(&stored))
	require.Equal(t, orders, stored)
	payments := c.paymentsPerOrder(t)
	require.Len(t, payments, orders)
	for id, n := range payments {
		require.Equal(t, 1, n, "order %s must be paid exactly once", id)
	}
}

// kafkaBroker starts an in-process Kafka (kfake) holding topic in
// partitions partitions, and returns watermill-kafka's publisher and
// subscriber on it (keyed by pgbox's kafka.Marshaler, the "payments"
// group reading from the oldest offset), closed with the test, and the
// cluster's addresses.
func kafkaBroker(t *testing.T, topic string, partitions int32) (broker, []string) {
	t.Helper()
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
	return broker{publisher: pub, subscriber: sub, topic: topic}, brokers
}

// A record from a producer that is not Watermill has no Watermill UUID, so
// a consumer on watermillinbox's default Config cannot store it: it is
// nacked, and Kafka redelivers it for ever with its partition stopped
// behind it. The handler says so once, at error level, through the
// Config's logger, naming IDFunc and PoisonPublisher, however often the
// record comes back. Before, pgbox logged nothing, and the only text was
// Watermill's, "ID is empty: set it", once per redelivery.
func TestKafkaForeignRecordOnTheDefaultConfig(t *testing.T) {
	t.Parallel()
	const topic = "ledger"
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()

	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	t.Cleanup(producer.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, producer.ProduceSync(ctx, &kgo.Record{Value: []byte(`{"n":1}`)}, &kgo.Record{Value: []byte(`{"n":2}`)}).FirstErr())

	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	in, err := inbox.New(pool, inbox.Config{Consumer: "ledger", Schema: schema})
	require.NoError(t, err)
	logger := watermillLogger(t)
	saramaCfg := wmkafka.DefaultSaramaSubscriberConfig()
	saramaCfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	sub, err := wmkafka.NewSubscriber(wmkafka.SubscriberConfig{
		Brokers: brokers, ConsumerGroup: "ledger", OverwriteSaramaConfig: saramaCfg, Unmarshaler: wmkafka.DefaultMarshaler{},
	}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	require.NoError(t, err)
	logs := &logtest.Recorder{}
	store := watermillinbox.Handler(watermillinbox.Config{Inbox: in, Logger: slog.New(logs)})
	var deliveries atomic.Int64
	router.AddConsumerHandler("ledger-inbox", topic, sub, func(m *message.Message) error {
		deliveries.Add(1)
		return store(m)
	})
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	require.Eventually(t, func() bool { return deliveries.Load() >= 5 }, time.Minute, 10*time.Millisecond,
		"the record is redelivered (%d deliveries)", deliveries.Load())
	recs := logs.Records(slog.LevelError, "a message that can never be stored is nacked")
	require.Len(t, recs, 1, "said once, not once per redelivery (%d deliveries)", deliveries.Load())
	require.Contains(t, recs[0].Message, "Config.IDFunc")
	require.Contains(t, recs[0].Message, "Config.PoisonPublisher")
	var topicAttr, errAttr string
	recs[0].Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "topic":
			topicAttr = a.Value.String()
		case "error":
			errAttr = a.Value.String()
		}
		return true
	})
	require.Equal(t, topic, topicAttr)
	require.Contains(t, errAttr, "no Watermill UUID")
	var stored int
	require.NoError(t, pool.QueryRow(context.Background(), ident.Render("SELECT count(*) FROM /* schema */inbox", schema)).Scan(&stored))
	require.Zero(t, stored, "the record behind it waits: the partition is stopped")
}

// A foreign record's place (kafka.OffsetID) is its id, and its timestamp
// (kafka.RecordTime), which reaches the message a Watermill router hands
// the handler, dates it: the record nacked and redelivered, and read
// again from its offset by another group, keeps both, and its timestamp is
// its producer's send. A pgbox message the relay publishes again is a new
// record, with the same UUID but at a new offset and with a later time:
// the time is fixed with the offset, never with pgbox's id.
func TestKafkaRecordTime(t *testing.T) {
	t.Parallel()
	const topic = "ledger"
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	t.Cleanup(producer.Close)

	type dated struct {
		uuid, id string
		at       time.Time
	}
	// read runs a router on a subscriber of group from the oldest offset
	// and returns the first n messages its handler is handed (the id an
	// error's text if OffsetID fails), the first nacked.
	read := func(group string, n int) []dated {
		saramaCfg := wmkafka.DefaultSaramaSubscriberConfig()
		saramaCfg.Consumer.Offsets.Initial = sarama.OffsetOldest
		logger := watermillLogger(t)
		sub, err := wmkafka.NewSubscriber(wmkafka.SubscriberConfig{
			Brokers: brokers, ConsumerGroup: group, OverwriteSaramaConfig: saramaCfg, Unmarshaler: kafka.Marshaler(),
		}, logger)
		require.NoError(t, err)
		router, err := message.NewRouter(message.RouterConfig{}, logger)
		require.NoError(t, err)
		got := make(chan dated, n)
		var handed atomic.Int64
		router.AddConsumerHandler(group, topic, sub, func(m *message.Message) error {
			id, err := kafka.OffsetID(m)
			if err != nil {
				id = err.Error()
			}
			select {
			case got <- dated{m.UUID, id, kafka.RecordTime(m)}:
			default: // more than n: not looked at
			}
			if handed.Add(1) == 1 {
				return errors.New("nacked, to be redelivered")
			}
			return nil
		})
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- router.Run(ctx) }()
		defer func() { stop(); require.NoError(t, <-done); _ = sub.Close() }()
		var out []dated
		for range n {
			select {
			case d := <-got:
				out = append(out, d)
			case <-time.After(time.Minute):
				t.Fatalf("group %s: %d of %d messages within a minute", group, len(out), n)
			}
		}
		return out
	}
	// later waits until the clock, to Kafka's milliseconds, is past at.
	later := func(at time.Time) {
		require.Eventually(t, func() bool { return time.Now().Truncate(time.Millisecond).After(at) }, time.Second, time.Millisecond)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sent := time.Now().Truncate(time.Millisecond) // Kafka keeps milliseconds
	require.NoError(t, producer.ProduceSync(ctx, &kgo.Record{Value: []byte(`{"entry":1}`)}).FirstErr())
	first := read("payments", 2)
	require.Equal(t, dated{"", topic + "/0/0", first[0].at}, first[0])
	require.False(t, first[0].at.Before(sent), "record time %s is before the send at %s", first[0].at, sent)
	require.False(t, first[0].at.After(time.Now()), "record time %s is after the read", first[0].at)
	require.Equal(t, first[0], first[1], "redelivered after a nack: the same id and time")
	require.Equal(t, first[0], read("audit", 2)[0], "read again from the offset: the same id and time")

	pub, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{Brokers: brokers, Marshaler: kafka.Marshaler()}, watermillLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	row := message.NewMessage(uuid.Must(uuid.NewV7()).String(), []byte(`{"order":"o-1"}`))
	later(first[0].at)
	require.NoError(t, pub.Publish(topic, row))
	rows := read("billing", 3) // offset 0 nacked and redelivered, then offset 1
	later(rows[2].at)
	require.NoError(t, pub.Publish(topic, row))
	again := read("ledger", 4)[3]
	require.Equal(t, row.UUID, rows[2].uuid)
	require.Equal(t, dated{row.UUID, topic + "/0/2", again.at}, again, "published again: the same UUID, a new record at a new offset")
	require.True(t, again.at.After(rows[2].at), "and a later time: %s, first %s", again.at, rows[2].at)
}
