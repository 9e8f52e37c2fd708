package rabbitmq

import (
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// UnroutableError is Publish's error for messages RabbitMQ returned
// unroutable: their topic's exchange had no queue bound to it, so no
// consumer would ever have received them. RabbitMQ confirms such a
// message and drops it; the publisher publishes with the mandatory flag,
// so that RabbitMQ returns it instead, and fails the call (PublishResults
// gives each returned message an UnroutableError naming it alone).
//
// With NewPublisher's declarations a topic's exchange always has a queue
// bound, so this happens only when they were undone behind the
// publisher's back: a consumer's queue deleted, or the exchange deleted
// and declared again. The publisher then declares them again on its next
// publish to the topic, and a retry goes through.
//
// It is the messages' failure, not an outage: Unreachable reports false,
// so a relay charges their rows an attempt, records this error on them,
// and publishes them again after its backoff.
type UnroutableError struct {
	// Messages are the UUIDs of the returned messages.
	Messages []string
	// Reply is RabbitMQ's reason, such as "312 NO_ROUTE".
	Reply string
	// Topic is the topic, and the exchange, they were published to.
	Topic string
}

func (e *UnroutableError) Error() string {
	what := "message " + e.Messages[0]
	if len(e.Messages) > 1 {
		what = "messages " + strings.Join(e.Messages, ", ")
	}
	return fmt.Sprintf("rabbitmq: RabbitMQ returned %s unroutable (%s): no queue is bound to exchange %q, so no consumer would receive it, "+
		"and it does not count as published. Each consumer's queue must exist, bound, before the first publish: "+
		"name every consumer in rabbitmq.NewPublisher (the publisher declares their queues again on its next publish to the topic), "+
		"or declare the queue yourself", what, e.Reply, e.Topic)
}

// Unreachable reports false: RabbitMQ answered, and refused the messages.
// relay.IsUnreachable takes this method's word over anything the error
// wraps.
func (e *UnroutableError) Unreachable() bool { return false }

// unroutable returns the error for r, the return of a message published
// to topic. A return names its message by the UUID header watermill-amqp's
// marshaler sets.
func unroutable(topic string, r amqp091.Return) *UnroutableError {
	id, ok := r.Headers[amqp.DefaultMessageUUIDHeaderKey].(string)
	if !ok {
		id = "(with no UUID header)"
	}
	return &UnroutableError{Topic: topic, Reply: fmt.Sprintf("%d %s", r.ReplyCode, r.ReplyText), Messages: []string{id}}
}
