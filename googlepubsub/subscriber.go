package googlepubsub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/ThreeDotsLabs/watermill/message"
)

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Subscription names the subscription a topic's messages are received
	// from: an ID in the client's project or a full name
	// ("projects/p/subscriptions/s"). It must exist. Required.
	Subscription func(topic string) string

	// ReceiveSettings are the Pub/Sub client's. Its MaxExtension is how
	// long a message may stay unacknowledged, its ack deadline extended by
	// the client, before Pub/Sub delivers it again: make it longer than
	// the slowest store in the inbox, or the message arrives twice (a
	// duplicate the inbox drops, at the cost of a second insert).
	// Defaults to pubsub.DefaultReceiveSettings (an hour).
	ReceiveSettings pubsub.ReceiveSettings

	// Logger receives the error a subscription ends with. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// Subscriber receives Watermill messages from Pub/Sub subscriptions. A
// message is acknowledged to Pub/Sub when the Watermill handler acks it
// (watermillinbox: once the inbox has committed it) and nacked, for
// Pub/Sub to deliver it again, when the handler nacks it or the
// subscription ends first.
type Subscriber struct {
	cfg    SubscriberConfig
	client *pubsub.Client

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup
}

// NewSubscriber returns a subscriber on client. Closing it ends its
// subscriptions, not the client.
func NewSubscriber(client *pubsub.Client, cfg SubscriberConfig) (*Subscriber, error) {
	if cfg.Subscription == nil {
		return nil, errors.New("googlepubsub: SubscriberConfig.Subscription is required: it names the subscription each topic is received from")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Subscriber{cfg: cfg, client: client, closing: make(chan struct{})}, nil
}

// Subscribe receives topic's messages from its subscription until ctx is
// done or the subscriber is closed; the channel is closed then. It fails
// if the subscription does not exist.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("googlepubsub: the subscriber is closed")
	}
	name := s.cfg.Subscription(topic)
	sub := s.client.Subscriber(name)
	if _, err := s.client.SubscriptionAdminClient.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: sub.String()}); err != nil {
		return nil, fmt.Errorf("googlepubsub: subscription %s for topic %s: %w (create it, on the topic, before the relay publishes)", sub, topic, err)
	}
	sub.ReceiveSettings = s.cfg.ReceiveSettings
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan *message.Message)
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer cancel()
		err := sub.Receive(ctx, func(ctx context.Context, pm *pubsub.Message) {
			m := fromPubSub(pm)
			m.SetContext(ctx)
			select {
			case out <- m:
			case <-ctx.Done():
				pm.Nack()
				return
			}
			select {
			case <-m.Acked():
				pm.Ack()
			case <-m.Nacked():
				pm.Nack()
			case <-ctx.Done():
				pm.Nack()
			}
		})
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.ErrorContext(ctx, "googlepubsub: a subscription ended", slog.String("subscription", sub.String()), slog.String("topic", topic), slog.Any("error", err))
		}
	}()
	return out, nil
}

// Close ends every subscription and waits for them to end.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.closing)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}
