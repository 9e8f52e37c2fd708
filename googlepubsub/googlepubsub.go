// Package googlepubsub wires pgbox to Google Cloud Pub/Sub: a Watermill
// publisher for the relay and a Watermill subscriber for
// watermillinbox, on cloud.google.com/go/pubsub/v2.
//
// Each Watermill message is one Pub/Sub message: its UUID (the outbox id,
// which the inbox dedupes on) in the attribute UUIDAttribute, its metadata
// in the other attributes, its payload's bytes unchanged as the data, and
// pgbox's ordering key (pgbox.MetadataOrderingKey) as the Pub/Sub ordering
// key. Dedupe on the UUID, never on Pub/Sub's message ID: Pub/Sub gives
// every publish a new one, so a row the relay publishes again is a new
// message.
//
//	pub := googlepubsub.NewPublisher(client, googlepubsub.PublisherConfig{})
//	r, _ := relay.New(pool, relay.Config{Publisher: pub})
//
//	sub, _ := googlepubsub.NewSubscriber(client, googlepubsub.SubscriberConfig{
//		Subscription: func(topic string) string { return topic + ".payments" },
//	})
//	router.AddConsumerHandler("payments-inbox", "orders", sub, watermillinbox.Handler(...))
//
// The package creates no topic and no subscription: create them first, the
// consumers' subscriptions before the relay publishes, since Pub/Sub
// drops what is published to a topic with no subscription, as confirmed
// as any other publish. Turn on message ordering on a subscription whose
// consumer needs its keys' order.
//
// # Dating a foreign message ID
//
// A message from a producer that is not Watermill has no UUID. The
// subscriber gives every message its Pub/Sub message ID and publish time
// in the metadata (MetadataMessageID, MetadataPublishTime). Pub/Sub gives
// one message the same ID and publish time on every delivery (after a
// nack, or an ack deadline passed), so the publish time, which PublishTime
// reads, dates the message ID: the inbox keeps such ids at the cost of
// dated ones, not of random ones. Pass the pair to watermillinbox:
//
//	watermillinbox.Config{
//		IDFunc:     watermillinbox.UUIDOr(watermillinbox.MetadataID(googlepubsub.MetadataMessageID)),
//		IDTimeFunc: googlepubsub.PublishTime,
//	}
//
// That absorbs Pub/Sub's redeliveries, not a producer's retried publish,
// which is a new message with a new ID and a new publish time: where the
// producer sets an id of its own, dedupe on that, and never date it by
// PublishTime. pgbox's ids are UUIDv7s, dated by themselves, and the inbox
// ignores the time given with them (a row the relay publishes again has a
// new publish time).
//
// Why not watermill-googlecloud: pgbox needs the ordering key carried, an
// ordering key's publishing resumed after a failed publish (the client
// pauses the key until then, so the relay's retry would fail too), each
// publish sent at once rather than held for a batch, and an outage told
// apart from a refusal (see Publisher).
package googlepubsub

import (
	"fmt"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/pgbox/pgbox"
)

// UUIDAttribute is the attribute that carries a message's Watermill UUID,
// named as watermill-googlecloud names it.
const UUIDAttribute = "_watermill_message_uuid"

// The metadata keys under which the subscriber puts what Pub/Sub says of
// each message it receives, whoever published it. They do not begin with
// "goog", which Pub/Sub reserves in attribute names, so a message received
// and published on keeps them as attributes; the subscriber replaces them
// with the new message's.
const (
	// MetadataMessageID is the key of the message's Pub/Sub message ID.
	MetadataMessageID = "pubsub_message_id"
	// MetadataPublishTime is the key of the time Pub/Sub took the message
	// from its publisher, in RFC 3339 with nanoseconds, UTC. PublishTime
	// reads it.
	MetadataPublishTime = "pubsub_publish_time"
)

// PublishTime returns the time Pub/Sub took msg from its publisher, which
// the subscriber puts in the metadata under MetadataPublishTime; the zero
// time when msg has none, or one that is not an RFC 3339 time.
//
// Pub/Sub gives one message (one message ID) the same publish time on
// every delivery, so it dates the message ID for watermillinbox's
// IDTimeFunc (see the package doc). A message published again is a new
// message with a new time; do not date any other id with it.
func PublishTime(msg *message.Message) time.Time {
	at, err := time.Parse(time.RFC3339Nano, msg.Metadata.Get(MetadataPublishTime))
	if err != nil {
		return time.Time{}
	}
	return at
}

// toPubSub makes m a Pub/Sub message.
func toPubSub(m *message.Message) (*pubsub.Message, error) {
	if _, ok := m.Metadata[UUIDAttribute]; ok {
		return nil, fmt.Errorf("googlepubsub: message %s: metadata key %q is reserved for the message's UUID: rename it", m.UUID, UUIDAttribute)
	}
	attrs := make(map[string]string, len(m.Metadata)+1)
	for k, v := range m.Metadata {
		attrs[k] = v
	}
	attrs[UUIDAttribute] = m.UUID
	return &pubsub.Message{Data: m.Payload, Attributes: attrs, OrderingKey: m.Metadata.Get(pgbox.MetadataOrderingKey)}, nil
}

// fromPubSub makes pm a Watermill message, with its message ID and
// publish time in the metadata. A message from a producer that is not
// Watermill has no UUID: watermillinbox refuses it, naming Config.IDFunc.
func fromPubSub(pm *pubsub.Message) *message.Message {
	m := message.NewMessage(pm.Attributes[UUIDAttribute], pm.Data)
	for k, v := range pm.Attributes {
		if k != UUIDAttribute {
			m.Metadata.Set(k, v)
		}
	}
	m.Metadata.Set(MetadataMessageID, pm.ID)
	// Set or removed, never left from an earlier hop: it would date this
	// message wrong.
	if pm.PublishTime.IsZero() {
		delete(m.Metadata, MetadataPublishTime)
	} else {
		m.Metadata.Set(MetadataPublishTime, pm.PublishTime.UTC().Format(time.RFC3339Nano))
	}
	return m
}
