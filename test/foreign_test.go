package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/watermillinbox"
)

// A producer that is not Watermill (sarama, writing to Kafka directly) sends records with no Watermill UUID: the consumer takes its
// dedupe key from their x-event-id header, and a record without one, in
// the middle of the partition, goes to the poison topic with the reason
// instead of stopping the partition behind it.
func TestForeignProducer(t *testing.T) {
	t.Parallel()
	const topic, poisonTopic, events = "payments", "payments.poison", 50
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic, poisonTopic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()

	// The foreign producer, sarama on its own: every event twice (a
	// retry), one record with no id among them, all under one key, so on
	// one partition.
	producerCfg := sarama.NewConfig()
	producerCfg.Producer.Return.Successes = true
	producer, err := sarama.NewSyncProducer(brokers, producerCfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Close() })
	var records []*sarama.ProducerMessage
	for i := range events {
		r := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("acct-1"), Value: sarama.StringEncoder(fmt.Sprintf(`{"n":%d}`, i)),
			Headers: []sarama.RecordHeader{{Key: []byte("x-event-id"), Value: fmt.Appendf(nil, "evt-%d", i)}}}
		records = append(records, r, r)
		if i == events/2 {
			records = append(records, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("acct-1"), Value: sarama.StringEncoder(`{"n":"lost its id"}`)})
		}
	}
	for _, r := range records {
		_, _, err := producer.SendMessage(r)
		require.NoError(t, err)
	}

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
	poison, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{Brokers: brokers, Marshaler: wmkafka.DefaultMarshaler{}}, logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close(); _ = poison.Close() })
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	require.NoError(t, err)
	router.AddConsumerHandler("ledger-inbox", topic, sub, watermillinbox.Handler(watermillinbox.Config{
		IDFunc:          watermillinbox.MetadataID("x-event-id"),
		Inbox:           in,
		PoisonPublisher: poison,
		PoisonTopic:     poisonTopic,
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	stored := func() (n int) {
		require.NoError(t, pool.QueryRow(context.Background(), ident.Render(
			"SELECT count(*) FROM /* schema */inbox WHERE message_id LIKE 'evt-%'", schema)).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return stored() == events }, time.Minute, 10*time.Millisecond,
		"the events behind the record with no id are stored")

	reader, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(poisonTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(reader.Close)
	pollCtx, cancelPoll := context.WithTimeout(context.Background(), time.Minute)
	defer cancelPoll()
	fetches := reader.PollFetches(pollCtx)
	require.NoError(t, pollCtx.Err())
	got := fetches.Records()
	require.Len(t, got, 1)
	require.Equal(t, `{"n":"lost its id"}`, string(got[0].Value))
	headers := map[string]string{}
	for _, h := range got[0].Headers {
		headers[h.Key] = string(h.Value)
	}
	require.Contains(t, headers[middleware.ReasonForPoisonedKey], `metadata "x-event-id" is missing or empty`)
	require.Equal(t, topic, headers[middleware.PoisonedTopicKey])
}
