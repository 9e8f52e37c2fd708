package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsBackend is NATS JetStream: one stream per topic, one durable consumer
// per group and stream.
type natsBackend struct {
	cfg Config
	js  jetstream.JetStream
	log watermill.LoggerAdapter
	nc  *nats.Conn
	pub message.Publisher
}

// openNATS connects to NATS JetStream and creates one stream per topic.
func openNATS(ctx context.Context, b *Broker, topics []string) (backend, error) {
	nc, err := nats.Connect(b.cfg.URL, nats.Name("pgbox orders example"))
	if err != nil {
		return nil, fmt.Errorf("broker: connect to %s: %w", b.cfg.URL, err)
	}
	n := &natsBackend{cfg: b.cfg, log: b.wmLogger, nc: nc}
	if err := n.init(ctx, topics); err != nil {
		nc.Close()
		return nil, fmt.Errorf("broker: %w", err)
	}
	return n, nil
}

func (n *natsBackend) init(ctx context.Context, topics []string) error {
	var err error
	if n.js, err = jetstream.New(n.nc); err != nil {
		return err
	}
	for _, topic := range topics {
		for _, t := range n.cfg.partitions(topic) {
			if _, err := n.js.CreateOrUpdateStream(ctx, n.streamConfig(t)); err != nil {
				return fmt.Errorf("create stream %s: %w", n.cfg.stream(t), err)
			}
		}
	}
	n.pub, err = wmnats.NewPublisher(wmnats.PublisherConfig{Conn: n.nc, ConfigureStream: n.streamConfig, Logger: n.log})
	return err
}

func resetNATS(ctx context.Context, cfg Config, topics []string) error {
	nc, err := nats.Connect(cfg.URL)
	if err != nil {
		return fmt.Errorf("broker: connect to %s: %w", cfg.URL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	for _, topic := range topics {
		for _, t := range cfg.partitions(topic) {
			if err := js.DeleteStream(ctx, cfg.stream(t)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("broker: delete stream %s: %w", cfg.stream(t), err)
			}
		}
	}
	return nil
}

func (n *natsBackend) publisher() message.Publisher { return n.pub }

func (n *natsBackend) subscriber(group string) (message.Subscriber, error) {
	return wmnats.NewSubscriber(wmnats.SubscriberConfig{
		AckWaitTimeout:  n.cfg.AckWait,
		ConfigureStream: n.streamConfig,
		ConsumeOptions:  []jetstream.PullConsumeOpt{jetstream.PullMaxMessages(32)},
		// A connection of its own: closing the subscriber drains it.
		Logger:              n.log,
		ResourceInitializer: n.groupConsumer(group),
		URL:                 n.cfg.URL,
	})
}

func (n *natsBackend) backlog(ctx context.Context, topic, group string) (int, error) {
	stream := n.cfg.stream(topic)
	c, err := n.js.Consumer(ctx, stream, consumerName(group, stream))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		info, err := n.js.Stream(ctx, stream)
		if err != nil {
			return 0, err
		}
		return int(info.CachedInfo().State.Msgs), nil
	}
	if err != nil {
		return 0, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(info.NumPending) + info.NumAckPending, nil
}

func (n *natsBackend) close() { n.nc.Close() }

func (n *natsBackend) streamConfig(topic string) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: n.cfg.stream(topic), Subjects: []string{n.cfg.stream(topic)}}
}

// groupConsumer is a durable JetStream consumer shared by every subscriber
// of the group, with the short AckWait the demo needs. (Watermill's
// GroupedConsumer names the stream after the topic itself and keeps NATS's
// 30-second AckWait.)
func (n *natsBackend) groupConsumer(group string) wmnats.ResourceInitializer {
	return func(ctx context.Context, js jetstream.JetStream, topic string) (jetstream.Consumer, func(context.Context, watermill.LoggerAdapter), error) {
		stream, err := js.Stream(ctx, n.cfg.stream(topic))
		if err != nil {
			return nil, nil, fmt.Errorf("stream for topic %s: %w", topic, err)
		}
		c, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       n.cfg.AckWait,
			Durable:       consumerName(group, n.cfg.stream(topic)),
			MaxAckPending: 256,
		})
		return c, nil, err
	}
}

func consumerName(group, stream string) string { return "pgbox__" + group + "__" + stream }
