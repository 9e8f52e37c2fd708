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
// Why not watermill-googlecloud: pgbox needs the ordering key carried, an
// ordering key's publishing resumed after a failed publish (the client
// pauses the key until then, so the relay's retry would fail too), each
// publish sent at once rather than held for a batch, and an outage told
// apart from a refusal (see Publisher).
package googlepubsub

import (
	"fmt"

	"cloud.google.com/go/pubsub/v2"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/pgbox/pgbox"
)

// UUIDAttribute is the attribute that carries a message's Watermill UUID,
// named as watermill-googlecloud names it.
const UUIDAttribute = "_watermill_message_uuid"

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

// fromPubSub makes pm a Watermill message. A message from a producer that
// is not Watermill has no UUID: watermillinbox refuses it, naming
// Config.IDFunc.
func fromPubSub(pm *pubsub.Message) *message.Message {
	m := message.NewMessage(pm.Attributes[UUIDAttribute], pm.Data)
	for k, v := range pm.Attributes {
		if k != UUIDAttribute {
			m.Metadata.Set(k, v)
		}
	}
	return m
}
