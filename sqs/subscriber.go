package sqs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/pgbox/pgbox/internal/backoff"
)

// SubscriberWaitTimeDefault is how long a ReceiveMessage call waits for a
// message by default: SQS's longest long poll.
const SubscriberWaitTimeDefault = 20 * time.Second

// SubscriberNackDelayDefault is how long a nacked message stays hidden by
// default before SQS hands it out again.
const SubscriberNackDelayDefault = 5 * time.Second

// settleTimeout bounds the calls that settle a message after its
// subscription ended or its handler answered: DeleteMessage, and
// ChangeMessageVisibility to release it.
const settleTimeout = 10 * time.Second

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Client is the SQS client to receive with. Required.
	Client *awssqs.Client

	// ExtendEvery is how often the subscriber extends the visibility of
	// each message it holds, received and not yet acknowledged or nacked,
	// to VisibilityTimeout from then: a handler slower than the
	// visibility timeout, or messages waiting their turn behind one, are
	// not handed to another consumer meanwhile. Defaults to a third of
	// the visibility timeout; -1 disables it, and SQS then hands a message
	// held longer than the timeout out again (the inbox takes the copy as
	// a duplicate).
	ExtendEvery time.Duration

	// NackDelay is how long a message the handler nacks stays hidden
	// before SQS hands it out again, in whole seconds. Each handout counts
	// towards the queue's redrive policy: with watermillinbox, a nack
	// means the database could not be reached, and maxReceiveCount ×
	// NackDelay is how long that may last before SQS moves the messages
	// to the dead-letter queue. Defaults to SubscriberNackDelayDefault; -1
	// hands it out again at once.
	NackDelay time.Duration

	// Logger receives, at error level, failed receives (once until one
	// succeeds again, then an info line) and messages that could not be
	// deleted or read; at warn level, failed extensions. Defaults to
	// slog.Default().
	Logger *slog.Logger

	// VisibilityTimeout is the visibility timeout the subscriber asks for
	// on each receive, and extends to. Whole seconds, at least one.
	// Defaults to the queue's VisibilityTimeout attribute, read when
	// subscribing.
	VisibilityTimeout time.Duration

	// WaitTime is how long each ReceiveMessage call waits for a message
	// (long polling), in whole seconds up to 20. Defaults to
	// SubscriberWaitTimeDefault.
	WaitTime time.Duration
}

// Subscriber receives Watermill messages from SQS queues. A message is
// deleted from its queue once the handler acknowledges it, and made
// visible again after SubscriberConfig.NackDelay when the handler nacks
// it; meanwhile its visibility is extended (SubscriberConfig.ExtendEvery).
//
// Each subscription receives up to ten messages a call and hands them
// out one at a time; a failed receive (SQS unreachable) is retried with
// backoff until the subscription ends. Close, or the end of a
// subscription's context, stops it: the message being handled is left to
// become visible again when its timeout ends, and the messages not yet
// handed out are made visible again at once.
type Subscriber struct {
	cfg    SubscriberConfig
	ctx    context.Context // ended by Close
	cancel context.CancelFunc
	urls   *queueURLs

	mu     sync.Mutex // orders Subscribe's start of a subscription before Close's wait
	closed bool
	wg     sync.WaitGroup
}

var _ message.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a subscriber configured by cfg. It fails, naming
// the field, when cfg.Client is nil or a duration is out of range.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	if cfg.Client == nil {
		return nil, errors.New("sqs: SubscriberConfig.Client is nil: pass an *sqs.Client, e.g. sqs.NewFromConfig(awsConfig)")
	}
	if cfg.VisibilityTimeout != 0 && (cfg.VisibilityTimeout < time.Second || cfg.VisibilityTimeout%time.Second != 0) {
		return nil, fmt.Errorf("sqs: SubscriberConfig.VisibilityTimeout is %s: give whole seconds, at least 1s, or 0 for the queue's", cfg.VisibilityTimeout)
	}
	if cfg.WaitTime < 0 || cfg.WaitTime > SubscriberWaitTimeDefault || cfg.WaitTime%time.Second != 0 {
		return nil, fmt.Errorf("sqs: SubscriberConfig.WaitTime is %s: give whole seconds up to 20s, or 0 for the default", cfg.WaitTime)
	}
	if cfg.NackDelay < -1 || cfg.NackDelay%time.Second != 0 && cfg.NackDelay != -1 {
		return nil, fmt.Errorf("sqs: SubscriberConfig.NackDelay is %s: give whole seconds, 0 for the default, or -1 for at once", cfg.NackDelay)
	}
	if cfg.ExtendEvery < -1 {
		return nil, fmt.Errorf("sqs: SubscriberConfig.ExtendEvery is %s: give a positive duration, 0 for the default, or -1 to disable it", cfg.ExtendEvery)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.WaitTime == 0 {
		cfg.WaitTime = SubscriberWaitTimeDefault
	}
	switch cfg.NackDelay {
	case 0:
		cfg.NackDelay = SubscriberNackDelayDefault
	case -1:
		cfg.NackDelay = 0
	}
	s := &Subscriber{cfg: cfg, urls: &queueURLs{client: cfg.Client, urls: map[string]string{}}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Subscribe receives the messages of the queue named topic on the channel
// it returns, which is closed when ctx ends or the subscriber is closed.
// It fails when the queue cannot be found, or its visibility timeout read.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	url, err := s.urls.get(ctx, topic)
	if err != nil {
		return nil, err
	}
	visibility := s.cfg.VisibilityTimeout
	if visibility == 0 {
		if visibility, err = s.queueVisibility(ctx, topic, url); err != nil {
			return nil, err
		}
	}
	extendEvery := s.cfg.ExtendEvery
	if extendEvery == 0 {
		extendEvery = visibility / 3
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("sqs: the subscriber is closed")
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	out := make(chan *message.Message)
	q := &queue{s: s, name: topic, url: url, visibility: visibility, extendEvery: extendEvery, out: out}
	s.wg.Go(func() {
		defer close(out)
		defer stop()
		defer cancel()
		q.receive(ctx)
	})
	return out, nil
}

// queueVisibility reads the VisibilityTimeout attribute of the queue.
func (s *Subscriber) queueVisibility(ctx context.Context, topic, url string) (time.Duration, error) {
	out, err := s.cfg.Client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameVisibilityTimeout},
	})
	if err != nil {
		return 0, outage(fmt.Errorf("sqs: the visibility timeout of queue %q: %w", topic, err))
	}
	secs, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameVisibilityTimeout)])
	if err != nil || secs < 1 {
		return 0, fmt.Errorf("sqs: queue %q has visibility timeout %q: set SubscriberConfig.VisibilityTimeout", topic, out.Attributes[string(types.QueueAttributeNameVisibilityTimeout)])
	}
	return time.Duration(secs) * time.Second, nil
}

// Close ends every subscription and waits until each has settled its
// messages (see Subscriber). Calls after the first do nothing.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}

// queue is one subscription.
type queue struct {
	s           *Subscriber
	name, url   string
	visibility  time.Duration
	extendEvery time.Duration // -1: never
	out         chan<- *message.Message
}

// receive receives and hands out messages until ctx ends.
func (q *queue) receive(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		res, err := q.s.cfg.Client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl:              aws.String(q.url),
			MaxNumberOfMessages:   10,
			MessageAttributeNames: []string{"All"},
			AttributeNames:        []types.QueueAttributeName{sentTimestamp},
			VisibilityTimeout:     int32(q.visibility / time.Second),
			WaitTimeSeconds:       int32(q.s.cfg.WaitTime / time.Second),
		})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if failures == 0 {
				q.s.cfg.Logger.ErrorContext(ctx, "sqs: receive failed; trying again with backoff until it succeeds",
					slog.String("queue", q.name), slog.String("error", err.Error()))
			}
			failures++
			select {
			case <-ctx.Done():
			case <-time.After(backoff.Exponential(failures, 100*time.Millisecond, 5*time.Second)):
			}
			continue
		}
		if failures > 0 {
			q.s.cfg.Logger.InfoContext(ctx, "sqs: receiving again", slog.String("queue", q.name), slog.Int("failed_receives", failures))
			failures = 0
		}
		q.handOut(ctx, res.Messages)
	}
}

// handOut hands msgs out one at a time, extending the visibility of those
// not yet settled meanwhile. If ctx ends first, it releases those not
// handed out.
func (q *queue) handOut(ctx context.Context, msgs []types.Message) {
	if len(msgs) == 0 {
		return
	}
	held := &held{handles: map[string]bool{}}
	for _, m := range msgs {
		held.handles[*m.ReceiptHandle] = true
	}
	if q.extendEvery > 0 {
		stop := make(chan struct{})
		var extending sync.WaitGroup
		extending.Go(func() { q.extend(ctx, held, stop) })
		defer func() { close(stop); extending.Wait() }()
	}
	for i, m := range msgs {
		if !q.deliver(ctx, m) {
			for _, rest := range msgs[i+1:] {
				q.changeVisibility(*rest.ReceiptHandle, 0)
			}
			return
		}
		held.done(*m.ReceiptHandle)
	}
}

// deliver hands m out and settles it as its handler says. It reports
// false when ctx ended first.
func (q *queue) deliver(ctx context.Context, m types.Message) bool {
	msg, err := unmarshal(m)
	if err != nil {
		// Left to come back after its visibility timeout, and to reach
		// the queue's dead-letter queue after its redrive policy's
		// receive count, if it has one.
		q.s.cfg.Logger.ErrorContext(ctx, "sqs: a message could not be read; left in the queue", slog.String("queue", q.name), slog.String("error", err.Error()))
		return true
	}
	msgCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	msg.SetContext(msgCtx)
	select {
	case q.out <- msg:
	case <-ctx.Done():
		q.changeVisibility(*m.ReceiptHandle, 0)
		return false
	}
	select {
	case <-msg.Acked():
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		defer cancel()
		if _, err := q.s.cfg.Client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(q.url), ReceiptHandle: m.ReceiptHandle}); err != nil {
			q.s.cfg.Logger.ErrorContext(ctx, "sqs: an acknowledged message could not be deleted; SQS will deliver it again, and the inbox take it as a duplicate",
				slog.String("queue", q.name), slog.String("message_id", aws.ToString(m.MessageId)), slog.String("error", err.Error()))
		}
	case <-msg.Nacked():
		q.changeVisibility(*m.ReceiptHandle, q.s.cfg.NackDelay)
	case <-ctx.Done():
		return false
	}
	return true
}

// changeVisibility sets the visibility timeout of the message with handle
// to d from now; 0 makes it visible again at once. A failure is logged:
// the message then comes back when its timeout ends.
func (q *queue) changeVisibility(handle string, d time.Duration) {
	// Not the subscription's context: releasing goes on while it ends.
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	_, err := q.s.cfg.Client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(q.url), ReceiptHandle: aws.String(handle), VisibilityTimeout: int32(d / time.Second),
	})
	if err != nil && q.s.ctx.Err() == nil {
		q.s.cfg.Logger.Warn("sqs: could not change a message's visibility; it comes back when its visibility timeout ends",
			slog.String("queue", q.name), slog.Duration("visibility", d), slog.String("error", err.Error()))
	}
}

// extend extends the visibility of the messages held every extendEvery
// until stop is closed or ctx ends.
func (q *queue) extend(ctx context.Context, h *held, stop <-chan struct{}) {
	tick := time.NewTicker(q.extendEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
			for _, handle := range h.list() {
				q.changeVisibility(handle, q.visibility)
			}
		}
	}
}

// held is the receipt handles of the messages of a receive not yet
// settled.
type held struct {
	mu      sync.Mutex
	handles map[string]bool
}

func (h *held) done(handle string) {
	h.mu.Lock()
	delete(h.handles, handle)
	h.mu.Unlock()
}

func (h *held) list() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.handles))
	for handle := range h.handles {
		out = append(out, handle)
	}
	return out
}
