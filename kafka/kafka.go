// Package kafka wires pgbox to Kafka through watermill-kafka: a marshaler
// that keys each record by pgbox's ordering key.
//
//	import (
//		wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
//		"github.com/pgbox/pgbox/kafka"
//	)
//
//	pub, _ := wmkafka.NewPublisher(wmkafka.PublisherConfig{
//		Brokers:   brokers,
//		Marshaler: kafka.Marshaler(),
//	}, logger)
//	r, _ := relay.New(pool, relay.Config{Publisher: pub})
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
// outbox row's id. Never dedupe on topic, partition and offset: a row the
// relay publishes again (its first publish failed or got no answer after
// Kafka took it, or the relay crashed before recording it) is a new record,
// at a new offset, and would be handled twice.
package kafka

import (
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/pgbox/pgbox"
)

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
