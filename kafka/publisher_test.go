package kafka_test

import (
	"context"
	"strings"
	"testing"
	"time"

	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgbox/pgbox/kafka"
	"github.com/pgbox/pgbox/relay"
)

// NewPublisher refuses a configuration it cannot honour, saying what to
// change.
func TestNewPublisherRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  wmkafka.PublisherConfig
		want string
	}{
		{wmkafka.PublisherConfig{Marshaler: kafka.Marshaler()}, "Brokers is empty"},
		{wmkafka.PublisherConfig{Brokers: []string{"127.0.0.1:1"}}, "give kafka.Marshaler()"},
		{wmkafka.PublisherConfig{Brokers: []string{"127.0.0.1:1"}, Marshaler: kafka.Marshaler(), OTELEnabled: true}, "not supported"},
	} {
		_, err := kafka.NewPublisher(tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
}

// PublishResults gives each message of a call its own outcome: the ones
// Kafka took are nil, and on the topic; one the producer refuses (larger
// than Producer.MaxMessageBytes) fails alone, as a refusal, not an outage.
func TestPublishResultsPerMessage(t *testing.T) {
	t.Parallel()
	const topic = "results"
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	cfg := wmkafka.DefaultSaramaSyncPublisherConfig()
	cfg.Producer.MaxMessageBytes = 1000
	pub, err := kafka.NewPublisher(wmkafka.PublisherConfig{Brokers: cluster.ListenAddrs(), Marshaler: kafka.Marshaler(), OverwriteSaramaConfig: cfg})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	var _ relay.ResultPublisher = pub

	msgs := make([]*message.Message, 20)
	for i := range msgs {
		msgs[i] = message.NewMessage(uuid.NewString(), []byte("{}"))
	}
	const tooLarge = 7
	msgs[tooLarge].Payload = []byte(strings.Repeat("x", 2000))
	errs := pub.PublishResults(topic, msgs...)
	require.Len(t, errs, len(msgs))
	want := map[string]bool{}
	for i, err := range errs {
		if i == tooLarge {
			require.ErrorContains(t, err, "larger than configured Producer.MaxMessageBytes")
			require.ErrorContains(t, err, msgs[i].UUID)
			require.False(t, relay.IsUnreachable(err), "a refusal, not an outage: %v", err)
			continue
		}
		require.NoError(t, err, "message %d", i)
		want[msgs[i].UUID] = true
	}

	// Every message reported published is on the topic, and no other.
	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(consumer.Close)
	got := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for len(got) < len(want) {
		fetches := consumer.PollFetches(ctx)
		require.NoError(t, fetches.Err())
		fetches.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == wmkafka.UUIDHeaderKey {
					got[string(h.Value)] = true
				}
			}
		})
	}
	require.Equal(t, want, got)

	require.NoError(t, pub.Close())
	require.ErrorIs(t, pub.Publish(topic, message.NewMessage(uuid.NewString(), nil)), relay.ErrPublisherClosed)
}
