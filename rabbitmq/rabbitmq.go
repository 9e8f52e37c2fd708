// Package rabbitmq wires pgbox to RabbitMQ through watermill-amqp with the
// topology that loses nothing by default.
//
// RabbitMQ confirms a publish to an exchange that no queue is bound to, and
// drops the message: a relay that publishes before any consumer has
// declared its queue marks its rows published while they reach no one.
// watermill-amqp's publisher declares only the exchange, and only the
// consumer's subscriber declares and binds a queue, so with its stock
// configurations that happens whenever the producer starts first. Here the
// publisher declares, before its first publish to a topic, the topic's
// exchange and the queue of every consumer it names, bound to it; the
// subscriber declares the same. Messages published before a consumer
// starts wait in its queue.
//
//	pub, _ := rabbitmq.NewPublisher(url, []string{"payments", "notifications"}, logger)
//	r, _ := relay.New(pool, relay.Config{Publisher: pub})
//
//	sub, _ := amqp.NewSubscriber(rabbitmq.SubscriberConfig(url, "payments"), logger)
//	router.AddConsumerHandler("payments-inbox", "orders", sub, watermillinbox.Handler(...))
//
// Each topic is a durable fanout exchange of its name, and each consumer a
// durable queue named Queue(topic, consumer); messages are persistent and
// every publish waits for RabbitMQ's confirm, which it sends once the
// message is safe in every queue it was routed to.
package rabbitmq

import (
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/pgbox/pgbox/relay"
)

// PublisherChannels is how many channels a publisher keeps open and reuses,
// at most one per Publish call in progress: enough for a relay's default
// workers and the calls it may have given up on (relay.Config.PublishTimeout).
const PublisherChannels = 8

// Queue returns the name of consumer's queue for topic: "topic.consumer".
func Queue(topic, consumer string) string { return topic + "." + consumer }

// config is the part of the publisher's and the subscriber's
// configuration they share: one durable fanout exchange per topic, durable
// queues named by queue, persistent messages, confirmed publishes.
func config(url string, queue amqp.QueueNameGenerator) amqp.Config {
	c := amqp.NewDurablePubSubConfig(url, queue)
	c.Publish.ConfirmDelivery = true
	return c
}

// PublisherConfig returns the configuration of a publisher to topics that
// consumers consume: before its first publish to a topic, the publisher
// declares the topic's exchange and each consumer's queue, bound to it,
// and it publishes on PublisherChannels channels, reused. It fails when
// consumers is empty or names a consumer twice.
func PublisherConfig(url string, consumers []string) (amqp.Config, error) {
	if len(consumers) == 0 {
		return amqp.Config{}, errors.New("rabbitmq: no consumers: name every consumer of the topics, whose queues must exist before the first publish or RabbitMQ confirms and drops the messages")
	}
	seen := map[string]bool{}
	for _, c := range consumers {
		if c == "" || seen[c] {
			return amqp.Config{}, fmt.Errorf("rabbitmq: consumers %q: each must be named, once", consumers)
		}
		seen[c] = true
	}
	c := config(url, nil) // a publisher consumes no queue
	c.TopologyBuilder = &declaringBuilder{consumers: consumers}
	// Reuse channels: by default watermill-amqp opens a channel per
	// Publish call, and turns on its confirms, which halved the relay's
	// throughput once it published one message per call. A call takes a
	// channel from the pool, or waits for one, so the pool holds one per
	// call at once: relay workers, and calls the relay gave up on.
	c.Publish.ChannelPoolSize = PublisherChannels
	return c, nil
}

// SubscriberConfig returns the configuration of consumer's subscriber: it
// consumes Queue(topic, consumer), declared and bound as the publisher
// declares it.
func SubscriberConfig(url, consumer string) amqp.Config {
	return config(url, func(topic string) string { return Queue(topic, consumer) })
}

// declaringBuilder is watermill-amqp's default topology, with the
// publisher's exchange declaration also declaring and binding the queues.
type declaringBuilder struct {
	amqp.DefaultTopologyBuilder
	consumers []string
}

// ExchangeDeclare declares the topic's exchange and its consumers' queues,
// bound to it. The publisher calls it once per topic, before publishing.
func (b *declaringBuilder) ExchangeDeclare(ch *amqp091.Channel, exchange string, c amqp.Config) error {
	if err := b.DefaultTopologyBuilder.ExchangeDeclare(ch, exchange, c); err != nil {
		return fmt.Errorf("rabbitmq: declare exchange %q: %w", exchange, err)
	}
	for _, consumer := range b.consumers {
		q := Queue(exchange, consumer)
		if _, err := ch.QueueDeclare(q, c.Queue.Durable, c.Queue.AutoDelete, c.Queue.Exclusive, c.Queue.NoWait, c.Queue.Arguments); err != nil {
			return fmt.Errorf("rabbitmq: declare queue %q: %w", q, err)
		}
		if err := ch.QueueBind(q, "", exchange, c.QueueBind.NoWait, c.QueueBind.Arguments); err != nil {
			return fmt.Errorf("rabbitmq: bind queue %q to %q: %w", q, exchange, err)
		}
	}
	return nil
}

// Publisher is a watermill-amqp publisher with the declaring topology,
// whose errors while RabbitMQ cannot be reached wrap
// relay.ErrBrokerUnreachable, so that a relay pauses instead of charging
// its rows attempts.
type Publisher struct {
	*amqp.Publisher
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher connects to RabbitMQ at url and returns a publisher to
// topics that consumers consume (see PublisherConfig).
func NewPublisher(url string, consumers []string, logger watermill.LoggerAdapter) (*Publisher, error) {
	c, err := PublisherConfig(url, consumers)
	if err != nil {
		return nil, err
	}
	p, err := amqp.NewPublisher(c, logger)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	return &Publisher{Publisher: p}, nil
}

// Publish publishes msgs to topic and waits for RabbitMQ's confirms.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	err := p.Publisher.Publish(topic, msgs...)
	if err == nil || relay.IsUnreachable(err) {
		return err
	}
	if !p.IsConnected() || errors.Is(err, amqp091.ErrClosed) {
		return fmt.Errorf("%w: %w", relay.ErrBrokerUnreachable, err)
	}
	return err
}
