// Package kafka wires pgbox to Kafka: a marshaler that keys each record by
// pgbox's ordering key, for watermill-kafka's publisher and subscriber,
// and two publishers that are relay.ResultPublishers, so that a relay
// hands a batch's messages to the producer together rather than waiting
// for each one's acknowledgement before sending the next.
//
// FranzPublisher produces through a franz-go client, and costs the
// relay's process about a fifth less CPU a message than Sarama's producer
// (docs/benchmarks.md). Its
// records are the ones watermill-kafka's marshaler makes, so
// watermill-kafka's subscriber reads them with Marshaler():
//
//	import "github.com/twmb/franz-go/pkg/kgo"
//
//	client, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
//	pub, _ := kafka.NewFranzPublisher(kafka.FranzConfig{Client: client})
//	r, _ := relay.New(pool, relay.Config{Publisher: pub})
//
// Publisher produces on the same Sarama producer as watermill-kafka's
// publisher, configured the same way:
//
//	import (
//		wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
//		"github.com/pgbox/pgbox/kafka"
//	)
//
//	pub, _ := kafka.NewPublisher(wmkafka.PublisherConfig{
//		Brokers:   brokers,
//		Marshaler: kafka.Marshaler(),
//	})
//	r, _ := relay.New(pool, relay.Config{Publisher: pub})
//
// watermill-kafka's own publisher (wmkafka.NewPublisher, with the same
// configuration) works too, one message per call.
//
// The two place a key on different partitions (franz-go hashes keys as
// Kafka's Java client does, Sarama another way): a FranzPublisher taking
// over a topic that Publisher or watermill-kafka wrote keeps each key on
// its partition, and so in order, only with kgo.RecordPartitioner(
// SaramaPartitioner()). And Sarama creates a topic on its first record
// where franz-go does not unless the client is made with
// kgo.AllowAutoTopicCreation().
//
// # Order
//
// Kafka keeps order within a partition only, and picks a record's
// partition from its key. Marshaler sets the key to the message's ordering
// key (the relay puts outbox.Message.OrderingKey in the
// pgbox.MetadataOrderingKey metadata), so the messages of one key land on
// one partition, in the order the relay publishes them: commit order, one
// at a time per key across every relay process. Unkeyed messages are keyed
// by their id and spread over the partitions. Give the subscriber the same
// Marshaler (it unmarshals as watermill-kafka's default does).
//
// # Dedupe
//
// The consumer's inbox dedupes on the Watermill message UUID, which
// watermill-kafka carries in a record header and the relay sets to the
// outbox row's id. Never dedupe pgbox's messages on their topic,
// partition and offset (OffsetID): a row the relay publishes again (its
// first publish failed or got no answer after Kafka took it, or the relay
// crashed before recording it) is a new record, at a new offset, and
// would be handled twice.
//
// # A foreign producer's records
//
// A record from a producer that is not Watermill has no UUID. Where the
// producer puts an id of its own in a header or the payload, dedupe on
// that (watermillinbox.MetadataID, watermillinbox.PayloadID). Where it
// puts none, the record's place, its topic, partition and offset, is its
// only id, and OffsetID returns it; RecordTime returns the record's
// timestamp, which is stored with the record and read back the same on
// every read of its offset, so it dates that id. Pass the pair to
// watermillinbox, under a Watermill router:
//
//	watermillinbox.Config{
//		IDFunc:     watermillinbox.UUIDOr(kafka.OffsetID),
//		IDTimeFunc: kafka.RecordTime,
//	}
//
// UUIDOr keeps pgbox's own messages on the same topic deduped on their
// UUID, as above; the inbox dates those by the UUIDv7 itself and ignores
// the record's time, which a republished row's new record does not share.
// An offset id absorbs the consumer's re-reads (a nack, a rebalance, a
// restart before the offset was committed), not the producer's own
// retries, each a new record, unless the producer is idempotent
// (enable.idempotence), which makes the broker drop a retried batch. A
// topic deleted and made again starts its offsets at 0: its ids repeat
// those the inbox keeps.
package kafka

import (
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/pgbox/pgbox"
)

// RecordTime returns the timestamp of the Kafka record msg was read from,
// which watermill-kafka's subscriber puts in the message's context
// (kafka.MessageTimestampFromCtx) and a Watermill router keeps there; the
// zero time when the context has none, or one at or before the Unix epoch
// (a record without a timestamp).
//
// The timestamp is the producer's clock when the record was made (the
// topic's message.timestamp.type CreateTime, the default) or the broker's
// when it appended it (LogAppendTime). Either way it is stored with the
// record: every read of the record's offset gives the same time, so it
// dates OffsetID for watermillinbox's IDTimeFunc (see the package doc). A
// record produced again is a new record, at a new offset, with a time of
// its own: do not date any other id with it.
func RecordTime(msg *message.Message) time.Time {
	at, ok := kafka.MessageTimestampFromCtx(msg.Context())
	if !ok || at.UnixMilli() <= 0 {
		return time.Time{}
	}
	return at.UTC()
}

// OffsetID returns the place of the Kafka record msg was read from as a
// dedupe key, "topic/partition/offset" (a topic name holds no "/"): the
// key of a foreign producer's record that carries no id of its own (see
// the package doc). The partition and offset come from the context
// watermill-kafka's subscriber gives the message, and the topic from the
// one a Watermill router adds (message.SubscribeTopicFromCtx). It fails,
// saying so, for a message without them: one not read by watermill-kafka,
// or not handed over by a router.
func OffsetID(msg *message.Message) (string, error) {
	ctx := msg.Context()
	partition, okPartition := kafka.MessagePartitionFromCtx(ctx)
	offset, okOffset := kafka.MessagePartitionOffsetFromCtx(ctx)
	topic := message.SubscribeTopicFromCtx(ctx)
	if !okPartition || !okOffset || topic == "" {
		return "", errors.New("kafka: the message's context has no Kafka topic, partition and offset: " +
			"OffsetID takes them from a message watermill-kafka's subscriber read, handed over by a Watermill router")
	}
	return fmt.Sprintf("%s/%d/%d", topic, partition, offset), nil
}

// Marshaler returns watermill-kafka's marshaler with each record's key set
// to the message's ordering key, or to its id when it has none.
func Marshaler() kafka.MarshalerUnmarshaler {
	return kafka.NewWithPartitioningMarshaler(Key)
}

// Key returns the Kafka key of msg: its ordering key, or its id when it
// has none. It is a kafka.GeneratePartitionKey.
func Key(_ string, msg *message.Message) (string, error) {
	if k := msg.Metadata.Get(pgbox.MetadataOrderingKey); k != "" {
		return k, nil
	}
	return msg.UUID, nil
}
