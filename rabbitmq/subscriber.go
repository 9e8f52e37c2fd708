package rabbitmq

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// SubscriberConfig returns the configuration of consumer's subscriber: it
// consumes Queue(topic, consumer), declared and bound as the publisher
// declares it.
//
// Before it declares the queue, the subscriber checks whether the queue
// is missing from a topic that a Publisher has published to; it then
// missed whatever was published before now, and says so at error level
// through the subscriber's logger, naming the fix: name the consumer in
// NewPublisher. That happens when the consumer is not named there (the
// publisher declares only the queues of the consumers it names, so the
// messages went to those alone), or when its queue was deleted. Nothing
// is said when the queue exists, or when nothing was published to the
// topic yet.
func SubscriberConfig(url, consumer string) amqp.Config {
	c := config(url, func(topic string) string { return Queue(topic, consumer) })
	c.TopologyBuilder = &subscriberTopology{consumer: consumer, known: map[string]bool{}}
	return c
}

// marker is the name of the exchange a Publisher declares, after the
// topic's exchange and queues, before it first publishes to exchange: its
// existence tells a subscriber that exchange may have been published to,
// and that every consumer the publisher names has its queue. It is
// internal (no one can publish to it) and no queue is bound to it.
func marker(exchange string) string { return "pgbox.published." + exchange }

// declareMarker declares marker(exchange) on ch.
func declareMarker(ch *amqp091.Channel, exchange string) error {
	if err := ch.ExchangeDeclare(marker(exchange), amqp091.ExchangeFanout, true, false, true, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: declare exchange %q (it tells subscribers that %q has been published to): %w", marker(exchange), exchange, err)
	}
	return nil
}

// subscriberTopology is SubscriberConfig's TopologyBuilder: watermill-amqp's
// default, after the check that the consumer is not missing messages.
type subscriberTopology struct {
	amqp.DefaultTopologyBuilder
	consumer string

	mu    sync.Mutex
	known map[string]bool // queues this subscriber declared: not checked again
}

// BuildTopology declares the queue, the exchange and the binding, as
// watermill-amqp's default does, after checking whether the queue is
// missing from a topic that has been published to.
func (t *subscriberTopology) BuildTopology(ch *amqp091.Channel, params amqp.BuildTopologyParams, cfg amqp.Config, logger watermill.LoggerAdapter) error {
	t.mu.Lock()
	known := t.known[params.QueueName]
	t.mu.Unlock()
	if !known && params.ExchangeName != "" {
		t.check(params, cfg, logger)
	}
	if err := t.DefaultTopologyBuilder.BuildTopology(ch, params, cfg, logger); err != nil {
		return err
	}
	t.mu.Lock()
	t.known[params.QueueName] = true
	t.mu.Unlock()
	return nil
}

// check logs an error if params' queue does not exist while the marker of
// its exchange does: the consumer missed what was published before now.
// The marker is looked up first: a publisher declares it after the queues
// of the consumers it names, so a queue missing once the marker exists is
// one the publisher does not declare.
func (t *subscriberTopology) check(params amqp.BuildTopologyParams, cfg amqp.Config, logger watermill.LoggerAdapter) {
	fields := watermill.LogFields{"consumer": t.consumer, "queue": params.QueueName, "topic": params.Topic}
	missed, err := missedMessages(params, cfg)
	if err != nil {
		logger.Error("rabbitmq: could not check whether the consumer's queue is new on a topic already published to, "+
			"in which case the consumer missed what was published before now; declaring the queue", err, fields)
		return
	}
	if !missed {
		return
	}
	logger.Error(fmt.Sprintf("rabbitmq: consumer %q has no queue %q, though topic %q has been published to: whatever was published to it before now "+
		"never reached this consumer (RabbitMQ keeps a message only for the queues bound when it arrives), while the producer's outbox counts it published. "+
		"Name %q among the consumers in the producer's rabbitmq.NewPublisher, which declares their queues before it publishes; "+
		"to recover what was missed, publish those outbox rows again: the consumers that already hold them drop the copies as duplicates",
		t.consumer, params.QueueName, params.Topic, t.consumer), errMissedMessages, fields)
}

// errMissedMessages is the error logged with check's error.
var errMissedMessages = errors.New("consumer's queue declared after its topic was published to")

// checkTimeout bounds check's connection to RabbitMQ.
const checkTimeout = 10 * time.Second

// missedMessages reports whether params' exchange has its marker and its
// queue does not exist, on a connection of its own: a passive declaration
// of something missing closes its channel, which must not be the
// subscriber's.
func missedMessages(params amqp.BuildTopologyParams, cfg amqp.Config) (bool, error) {
	conn, err := dial(cfg.Connection)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	published, err := exists(conn, func(ch *amqp091.Channel) error {
		return ch.ExchangeDeclarePassive(marker(params.ExchangeName), amqp091.ExchangeFanout, true, false, true, false, nil)
	})
	if err != nil || !published {
		return false, err
	}
	queued, err := exists(conn, func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclarePassive(params.QueueName, cfg.Queue.Durable, cfg.Queue.AutoDelete, cfg.Queue.Exclusive, false, cfg.Queue.Arguments)
		return err
	})
	return err == nil && !queued, err
}

// exists reports whether the passive declaration declare, made on a
// channel of its own, found what it declares.
func exists(conn *amqp091.Connection, declare func(*amqp091.Channel) error) (bool, error) {
	ch, err := conn.Channel()
	if err != nil {
		return false, err
	}
	err = declare(ch)
	var amqpErr *amqp091.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp091.NotFound {
		return false, nil // RabbitMQ closed the channel
	}
	if err != nil {
		return false, err
	}
	_ = ch.Close()
	return true, nil
}

// dial connects as watermill-amqp's subscriber connects with c.
func dial(c amqp.ConnectionConfig) (*amqp091.Connection, error) {
	cfg := amqp091.Config{Dial: amqp091.DefaultDial(checkTimeout), Locale: "en_US"}
	switch {
	case c.AmqpConfig != nil:
		cfg = *c.AmqpConfig
	case c.TLSConfig != nil:
		cfg.TLSClientConfig = c.TLSConfig
	}
	return amqp091.DialConfig(c.AmqpURI, cfg)
}
