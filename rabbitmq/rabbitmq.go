// Package rabbitmq wires pgbox to RabbitMQ with the topology that loses
// nothing by default: a publisher of its own, which outlives broker
// outages (see Publisher), and watermill-amqp's subscriber.
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
// What is still lost is said, never silent. A consumer not named in
// NewPublisher has no queue until its subscriber first declares it, and
// misses what was published before: SubscriberConfig's subscriber notices
// and logs it at error level. A message that reaches an exchange with no
// queue bound at all (a queue deleted behind the publisher's back) is
// returned, not dropped, since the publisher publishes mandatory: the call
// fails with an *UnroutableError, the relay charges the row and publishes
// it again, and the publisher declares the queues again first.
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

import "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"

// PublisherChannels is how many idle channels a publisher keeps open for
// reuse. A Publish call takes an idle channel or opens one, and gives it
// back when it succeeds; a channel beyond this many is closed.
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
