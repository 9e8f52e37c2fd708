package sqs

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"golang.org/x/sync/errgroup"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/relay"
)

// PublisherConcurrencyDefault is how many SendMessage calls a Publish call
// makes at once by default.
const PublisherConcurrencyDefault = 10

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Client is the SQS client to publish with; its retry settings bound
	// how long a Publish call tries while SQS cannot be reached. Required.
	Client *awssqs.Client

	// Concurrency is how many SendMessage calls one Publish call makes at
	// once. Defaults to PublisherConcurrencyDefault.
	Concurrency int
}

// Publisher publishes Watermill messages to SQS queues, one SendMessage
// call per message. It is safe for concurrent use, and a
// relay.ResultPublisher: a relay hands it a batch's messages to a queue
// in one call, and records each message's own outcome.
//
// It sends messages one at a time, Concurrency at once, rather than in
// SendMessageBatch calls of ten: goaws v0.4.5, the SQS stand-in pgbox's
// tests run against, drops the message attributes of batched messages,
// and with them the id the consumer dedupes on, so batching could not be
// tested. The messages of a call go out in no set order; a relay's call
// holds at most one message per ordering key (a FIFO queue's message
// group), so per-key order does not depend on it.
//
// Errors that no message is at fault for (SQS unreachable, a server error
// or throttling once the client's retries ran out, refused credentials, a
// missing queue) wrap relay.ErrBrokerUnreachable: a relay pauses, and
// charges no attempt. A message SQS refuses (too large, for one) fails as
// the message's own failure.
type Publisher struct {
	cfg    PublisherConfig
	closed atomic.Bool
	urls   *queueURLs
}

var (
	_ message.Publisher     = (*Publisher)(nil)
	_ relay.ResultPublisher = (*Publisher)(nil)
)

// NewPublisher returns a publisher configured by cfg. It fails when
// cfg.Client is nil or cfg.Concurrency is negative.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.Client == nil {
		return nil, errors.New("sqs: PublisherConfig.Client is nil: pass an *sqs.Client, e.g. sqs.NewFromConfig(awsConfig)")
	}
	if cfg.Concurrency < 0 {
		return nil, fmt.Errorf("sqs: PublisherConfig.Concurrency is %d: give a positive number of calls, or 0 for the default (%d)", cfg.Concurrency, PublisherConcurrencyDefault)
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, PublisherConcurrencyDefault)
	return &Publisher{cfg: cfg, urls: &queueURLs{client: cfg.Client, urls: map[string]string{}}}, nil
}

// Publish sends msgs to the queue named topic. Each message's context
// bounds its SendMessage call. It returns once SQS has taken every
// message, or with an error that says how many it has not, and why the
// first did not (see relay.ResultsError); every message is tried.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	url, err := p.queue(topic, msgs)
	if err != nil || len(msgs) == 0 {
		return err
	}
	return relay.ResultsError("sqs", topic, p.send(url, topic, msgs))
}

// PublishResults sends msgs to the queue named topic, as Publish does,
// and returns each message's error: nil for a message SQS has taken.
func (p *Publisher) PublishResults(topic string, msgs ...*message.Message) []error {
	url, err := p.queue(topic, msgs)
	if err != nil {
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	return p.send(url, topic, msgs)
}

// queue returns the URL of the queue named topic, found with the first
// message's context, or why msgs cannot be sent (the publisher is
// closed). With no message it returns "".
func (p *Publisher) queue(topic string, msgs []*message.Message) (string, error) {
	if p.closed.Load() {
		return "", fmt.Errorf("sqs: %w", relay.ErrPublisherClosed)
	}
	if len(msgs) == 0 {
		return "", nil
	}
	return p.urls.get(msgs[0].Context(), topic)
}

// send sends msgs to the queue at url, named topic, Concurrency at once,
// and returns each one's error.
func (p *Publisher) send(url, topic string, msgs []*message.Message) []error {
	fifo := strings.HasSuffix(topic, ".fifo")
	errs := make([]error, len(msgs))
	var g errgroup.Group
	g.SetLimit(p.cfg.Concurrency)
	for i, msg := range msgs {
		g.Go(func() error {
			body, attrs, err := marshal(msg)
			if err != nil {
				errs[i] = err
				return nil
			}
			in := &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body), MessageAttributes: attrs}
			if fifo {
				in.MessageGroupId = aws.String(cmp.Or(msg.Metadata.Get(pgbox.MetadataOrderingKey), msg.UUID))
				in.MessageDeduplicationId = aws.String(msg.UUID)
			}
			if _, err := p.cfg.Client.SendMessage(msg.Context(), in); err != nil {
				errs[i] = outage(fmt.Errorf("sqs: send message %s to queue %q: %w", msg.UUID, topic, err))
			}
			return nil
		})
	}
	_ = g.Wait() // each message's error is in errs
	return errs
}

// Close makes later Publish calls fail. Calls in progress finish. The
// client is the caller's, and stays open.
func (p *Publisher) Close() error {
	p.closed.Store(true)
	return nil
}
