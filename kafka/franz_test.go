package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/kafka"
	"github.com/pgbox/pgbox/relay"
)

// franzCluster starts an in-process Kafka with the given topics of 4
// partitions, and returns a client of it with opts, closed after the test.
func franzCluster(t *testing.T, topics []string, opts ...kgo.Opt) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topics...))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	client, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return cluster, client
}

// readTopic reads n records from the start of topic.
func readTopic(t *testing.T, cluster *kfake.Cluster, topic string, n int) []*kgo.Record {
	t.Helper()
	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer consumer.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []*kgo.Record
	for len(got) < n {
		fetches := consumer.PollFetches(ctx)
		require.NoError(t, fetches.Err())
		got = append(got, fetches.Records()...)
	}
	require.Len(t, got, n)
	return got
}

// NewFranzPublisher refuses a configuration it cannot use, saying what to
// give instead.
func TestNewFranzPublisherRefuses(t *testing.T) {
	t.Parallel()
	_, err := kafka.NewFranzPublisher(kafka.FranzConfig{})
	require.ErrorContains(t, err, "FranzConfig.Client is nil: give a *kgo.Client")
	_, client := franzCluster(t, nil)
	_, err = kafka.NewFranzPublisher(kafka.FranzConfig{Client: client, Timeout: -time.Second})
	require.ErrorContains(t, err, "FranzConfig.Timeout is -1s: give a positive duration")
}

// A FranzPublisher's records are what watermill-kafka's subscriber reads
// with Marshaler(): each message's id, payload and metadata come back
// whole, and the record's key is the ordering key, or the id without one.
func TestFranzRecordsReadAsWatermillKafkas(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	cluster, client := franzCluster(t, []string{topic})
	pub, err := kafka.NewFranzPublisher(kafka.FranzConfig{Client: client})
	require.NoError(t, err)

	sent := map[string]*message.Message{}
	var msgs []*message.Message
	for i := range 10 {
		m := message.NewMessage(uuid.NewString(), fmt.Appendf(nil, `{"order":%d}`, i))
		m.Metadata.Set(pgbox.MetadataEventType, "OrderPlaced")
		if i%2 == 0 {
			m.Metadata.Set(pgbox.MetadataOrderingKey, fmt.Sprintf("order-%d", i%3))
		}
		msgs = append(msgs, m)
		sent[m.UUID] = m
	}
	require.NoError(t, pub.Publish(topic, msgs...))

	for _, r := range readTopic(t, cluster, topic, len(msgs)) {
		cm := &sarama.ConsumerMessage{Topic: r.Topic, Key: r.Key, Value: r.Value}
		for _, h := range r.Headers {
			cm.Headers = append(cm.Headers, &sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value})
		}
		got, err := kafka.Marshaler().Unmarshal(cm)
		require.NoError(t, err)
		want, ok := sent[got.UUID]
		require.True(t, ok, "a message that was not sent: %q", got.UUID)
		require.Equal(t, string(want.Payload), string(got.Payload))
		require.Equal(t, want.Metadata, got.Metadata)
		wantKey, err := kafka.Key(topic, want)
		require.NoError(t, err)
		require.Equal(t, wantKey, string(r.Key))
		delete(sent, got.UUID)
	}
	require.Empty(t, sent)
}

// PublishResults gives each message of a call its own outcome: one the
// client refuses (larger than its batches) and one whose metadata takes
// the id's header fail alone, as refusals, not an outage; the others are
// nil, and on the topic. Once closed, the publisher refuses every call.
func TestFranzPublishResultsPerMessage(t *testing.T) {
	t.Parallel()
	const topic = "results"
	cluster, client := franzCluster(t, []string{topic}, kgo.ProducerBatchMaxBytes(1000))
	pub, err := kafka.NewFranzPublisher(kafka.FranzConfig{Client: client})
	require.NoError(t, err)

	msgs := make([]*message.Message, 20)
	for i := range msgs {
		msgs[i] = message.NewMessage(uuid.NewString(), []byte("{}"))
	}
	const reserved, tooLarge = 7, 12
	msgs[tooLarge].Payload = []byte(strings.Repeat("x", 2000))
	msgs[reserved].Metadata.Set(wmkafka.UUIDHeaderKey, "mine")
	errs := pub.PublishResults(topic, msgs...)
	require.Len(t, errs, len(msgs))
	want := map[string]bool{}
	for i, err := range errs {
		switch i {
		case tooLarge:
			require.ErrorContains(t, err, "MESSAGE_TOO_LARGE")
		case reserved:
			require.ErrorContains(t, err, "metadata _watermill_message_uuid is reserved for the message's id")
		default:
			require.NoError(t, err, "message %d", i)
			want[msgs[i].UUID] = true
			continue
		}
		require.ErrorContains(t, err, msgs[i].UUID)
		require.False(t, relay.IsUnreachable(err), "a refusal, not an outage: %v", err)
	}
	got := map[string]bool{}
	for _, r := range readTopic(t, cluster, topic, len(want)) {
		got[string(r.Headers[0].Value)] = true
	}
	require.Equal(t, want, got)

	require.NoError(t, pub.Close())
	require.ErrorIs(t, pub.Publish(topic, message.NewMessage(uuid.NewString(), nil)), relay.ErrPublisherClosed)
}

// With Kafka taking records but never answering, a call ends at the
// publisher's Timeout, and its messages' errors say the broker is
// unreachable: a relay charges them no attempt.
func TestFranzPublisherBrokerSilent(t *testing.T) {
	t.Parallel()
	const topic = "silent"
	cluster, client := franzCluster(t, []string{topic})
	const timeout = 500 * time.Millisecond
	pub, err := kafka.NewFranzPublisher(kafka.FranzConfig{Client: client, Timeout: timeout})
	require.NoError(t, err)
	require.NoError(t, pub.Publish(topic, message.NewMessage(uuid.NewString(), nil)))
	cluster.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		return nil, nil, true // no answer
	})

	start := time.Now()
	errs := pub.PublishResults(topic, message.NewMessage(uuid.NewString(), nil), message.NewMessage(uuid.NewString(), nil))
	require.Less(t, time.Since(start), 10*timeout, "the call ends at the Timeout")
	for _, err := range errs {
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.True(t, relay.IsUnreachable(err), "an outage: %v", err)
	}
}

// A topic that does not exist, which franz-go does not create unless
// asked (kgo.AllowAutoTopicCreation), is the message's refusal, not an
// outage: a relay charges it, and publishes the other topics meanwhile.
func TestFranzPublisherUnknownTopic(t *testing.T) {
	t.Parallel()
	_, client := franzCluster(t, nil)
	pub, err := kafka.NewFranzPublisher(kafka.FranzConfig{Client: client})
	require.NoError(t, err)
	err = pub.Publish("no-such-topic", message.NewMessage(uuid.NewString(), nil))
	require.ErrorIs(t, err, kerr.UnknownTopicOrPartition)
	require.False(t, relay.IsUnreachable(err), "a refusal, not an outage: %v", err)
}

// SaramaPartitioner puts each key's records on the partition Publisher's
// Sarama producer does, so that a FranzPublisher taking over a topic
// keeps each ordering key on one partition, in order.
func TestSaramaPartitionerPlacesKeysAsPublisher(t *testing.T) {
	t.Parallel()
	const bySarama, byFranz = "by-sarama", "by-franz"
	cluster, client := franzCluster(t, []string{bySarama, byFranz}, kgo.RecordPartitioner(kafka.SaramaPartitioner()))
	sp, err := kafka.NewPublisher(wmkafka.PublisherConfig{Brokers: cluster.ListenAddrs(), Marshaler: kafka.Marshaler()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sp.Close() })
	fp, err := kafka.NewFranzPublisher(kafka.FranzConfig{Client: client})
	require.NoError(t, err)

	const keys = 50
	for topic, pub := range map[string]message.Publisher{bySarama: sp, byFranz: fp} {
		var msgs []*message.Message
		for k := range keys {
			m := message.NewMessage(uuid.NewString(), nil)
			m.Metadata.Set(pgbox.MetadataOrderingKey, fmt.Sprintf("customer-%d", k))
			msgs = append(msgs, m)
		}
		require.NoError(t, pub.Publish(topic, msgs...))
	}
	placed := func(topic string) map[string]int32 {
		m := map[string]int32{}
		for _, r := range readTopic(t, cluster, topic, keys) {
			m[string(r.Key)] = r.Partition
		}
		return m
	}
	sarama, franz := placed(bySarama), placed(byFranz)
	require.Len(t, sarama, keys)
	require.Equal(t, sarama, franz)
	spread := map[int32]bool{}
	for _, p := range sarama {
		spread[p] = true
	}
	require.Len(t, spread, 4, "the keys spread over every partition")
}
