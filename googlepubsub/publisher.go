package googlepubsub

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/ThreeDotsLabs/watermill/message"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pgbox/pgbox/relay"
)

// PublishTimeoutDefault is the default PublisherConfig.PublishTimeout.
const PublishTimeoutDefault = 10 * time.Second

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// PublishTimeout bounds each message's publish, retries included:
	// while Pub/Sub cannot be reached the client retries until then, and
	// the call then fails as an outage. Keep it under the relay's
	// Config.PublishTimeout, so that the relay hears of an outage from the
	// error rather than by giving up on the call. Defaults to
	// PublishTimeoutDefault (10s).
	PublishTimeout time.Duration
}

// Publisher publishes Watermill messages to Pub/Sub topics. A Publish call
// publishes them one at a time, each waiting for Pub/Sub's answer: it
// returns nil once every message is stored, and fails at the first message
// that is not, with the earlier ones published. It is a
// relay.ResultPublisher: PublishResults sends a call's messages together,
// bundled into the client's publish requests, then waits for each one's
// answer. A topic is a topic ID in the client's project or a full name
// ("projects/p/topics/t").
//
// Errors that mean Pub/Sub could not be reached (gRPC Unavailable or
// DeadlineExceeded, PublishTimeout passed) wrap relay.ErrBrokerUnreachable,
// so that a relay pauses and charges no attempt; others (a topic that does
// not exist, a message refused) are the message's failure. After a failed
// publish of a message with an ordering key the key is resumed, which the
// Pub/Sub client otherwise refuses to publish again.
type Publisher struct {
	client  *pubsub.Client
	timeout time.Duration

	mu     sync.Mutex
	closed bool
	topics map[string]*pubsub.Publisher
	// sending is held, shared, by each Publish and PublishResults call,
	// and by Close alone: the client's Flush must not race its Stop.
	sending sync.RWMutex
}

var _ relay.ResultPublisher = (*Publisher)(nil)

// NewPublisher returns a publisher on client. Closing it stops its
// topics' publishers, not the client.
func NewPublisher(client *pubsub.Client, cfg PublisherConfig) *Publisher {
	return &Publisher{
		client:  client,
		timeout: cmp.Or(cfg.PublishTimeout, PublishTimeoutDefault),
		topics:  map[string]*pubsub.Publisher{},
	}
}

// Publish publishes msgs to topic, in order, one at a time, each sent at
// once and waited for.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	p.sending.RLock()
	defer p.sending.RUnlock()
	t, err := p.topic(topic)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		pm, err := toPubSub(m)
		if err != nil {
			return err
		}
		if err := p.publishAlone(t, m, pm); err != nil {
			return publishError(topic, m.UUID, err)
		}
	}
	return nil
}

// PublishResults publishes msgs to topic, sending them all before waiting
// for any answer, and returns each message's error, in the order of msgs:
// nil for a message Pub/Sub stored. Errors are classified as Publish's
// are. Messages of one ordering key in one call are sent in order, but a
// failure of one does not hold back the next, so a relay, which puts at
// most one message per key in a call, is the caller it is made for.
//
// The client bundles the messages into its publish requests (a request
// per ordering key, and one for the unkeyed, up to 100 messages each), and
// a request the server refuses fails all of its messages: each message
// refused so, in a call of more than one, is sent again alone, so that
// only a message at fault fails (none was stored: a request is stored
// whole or not at all).
func (p *Publisher) PublishResults(topic string, msgs ...*message.Message) []error {
	p.sending.RLock()
	defer p.sending.RUnlock()
	errs := make([]error, len(msgs))
	t, err := p.topic(topic)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	type sent struct {
		pm     *pubsub.Message
		ctx    context.Context
		cancel context.CancelFunc
		res    *pubsub.PublishResult
	}
	all := make([]sent, len(msgs))
	for i, m := range msgs {
		pm, err := toPubSub(m)
		if err != nil {
			errs[i] = err
			continue
		}
		ctx, cancel := context.WithTimeout(m.Context(), p.timeout)
		all[i] = sent{pm: pm, ctx: ctx, cancel: cancel, res: t.Publish(ctx, pm)}
	}
	t.Flush()
	for i, s := range all {
		if s.res == nil {
			continue
		}
		err := p.await(s.ctx, t, s.pm, s.res)
		s.cancel()
		if err != nil && len(msgs) > 1 && !outage(err) {
			err = p.publishAlone(t, msgs[i], s.pm)
		}
		if err != nil {
			errs[i] = publishError(topic, msgs[i].UUID, err)
		}
	}
	return errs
}

// publishAlone publishes pm, m's, on t, sent at once, and waits for it
// (await), for the timeout at most.
func (p *Publisher) publishAlone(t *pubsub.Publisher, m *message.Message, pm *pubsub.Message) error {
	ctx, cancel := context.WithTimeout(m.Context(), p.timeout)
	defer cancel()
	res := t.Publish(ctx, pm)
	t.Flush()
	return p.await(ctx, t, pm, res)
}

// await waits for res, the answer to the publish of pm on t, until ctx
// ends (the timeout). The client pauses an ordering key when a publish of
// it fails, and fails the key's later publishes at once until
// ResumePublish: a failure resumes the key. A failure can also pause it
// later: the client's own retries of a publish whose Get ended at the
// deadline go on for PublishSettings.Timeout, and their failure pauses the
// key after Publish has returned (the relay met it once the broker was
// back, and charged a row a failure that was the outage's). A publish that
// finds its key paused so resumes it and is sent again, once: the failure
// that paused it was reported by the call that made the publish that
// failed.
func (p *Publisher) await(ctx context.Context, t *pubsub.Publisher, pm *pubsub.Message, res *pubsub.PublishResult) error {
	_, err := res.Get(ctx)
	if pm.OrderingKey == "" || err == nil {
		return err
	}
	t.ResumePublish(pm.OrderingKey)
	if !errors.As(err, new(pubsub.ErrPublishingPaused)) {
		return err
	}
	again := t.Publish(ctx, pm)
	t.Flush()
	if _, err = again.Get(ctx); err != nil {
		t.ResumePublish(pm.OrderingKey)
	}
	return err
}

// publishError says which message failed, and marks an outage as one.
func publishError(topic, uuid string, err error) error {
	if outage(err) {
		return fmt.Errorf("googlepubsub: publish message %s to topic %s: %w: %w", uuid, topic, relay.ErrBrokerUnreachable, err)
	}
	return fmt.Errorf("googlepubsub: publish message %s to topic %s: %w", uuid, topic, err)
}

// outage reports whether err, a publish's, means Pub/Sub could not be
// reached: gRPC Unavailable or DeadlineExceeded, or PublishTimeout passed.
func outage(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// topic returns the client's publisher for topic, made on first use: with
// message ordering on, its bundling settings the client's own (messages
// are sent when a call flushes them: Publish each one at once,
// PublishResults a call's together), and retried for PublishTimeout at
// most.
func (p *Publisher) topic(topic string) (*pubsub.Publisher, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("googlepubsub: %w", relay.ErrPublisherClosed)
	}
	t := p.topics[topic]
	if t == nil {
		t = p.client.Publisher(topic)
		t.EnableMessageOrdering = true
		// The client's own bound on a publish's retries, which goes on
		// after Get has given up, and which Close waits for.
		t.PublishSettings.Timeout = p.timeout
		p.topics[topic] = t
	}
	return t, nil
}

// Close stops the topics' publishers, after what they are sending.
func (p *Publisher) Close() error {
	p.sending.Lock()
	defer p.sending.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		for _, t := range p.topics {
			t.Stop()
		}
	}
	return nil
}
