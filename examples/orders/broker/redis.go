package broker

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	pgredisstream "github.com/pgbox/pgbox/redisstream"
)

// redisBackend is Redis Streams, published to through pgbox's redisstream
// and read through watermill-redisstream: one stream per topic, one
// consumer group per group, each subscriber a consumer of the group under
// a name of its own. The stream and the group are created
// by the first publish and the first subscriber; the group starts at the
// stream's first entry, so it reads what was published before it existed.
type redisBackend struct {
	cfg  Config
	log  watermill.LoggerAdapter
	opts *redis.Options
	pub  message.Publisher
	rdb  *redis.Client // for Backlog; the publisher and each subscriber have their own
}

// openRedis connects to Redis.
func openRedis(ctx context.Context, b *Broker, _ []string) (backend, error) {
	opts, err := redis.ParseURL(b.cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("broker: %q is not a Redis URL (redis://host:port/db): %w", b.cfg.URL, err)
	}
	r := &redisBackend{cfg: b.cfg, log: b.wmLogger, opts: opts, rdb: redis.NewClient(opts)}
	if err := r.rdb.Ping(ctx).Err(); err != nil {
		_ = r.rdb.Close()
		return nil, fmt.Errorf("broker: connect to %s: %w", b.cfg.URL, err)
	}
	// pgbox's publisher (watermill-redisstream's format, a call's XADDs in
	// one pipeline), on a client of its own, which its Close closes.
	r.pub, err = pgredisstream.NewPublisher(pgredisstream.PublisherConfig{Client: redis.NewClient(opts), OwnsClient: true})
	if err != nil {
		_ = r.rdb.Close()
		return nil, fmt.Errorf("broker: %w", err)
	}
	return r, nil
}

func resetRedis(ctx context.Context, cfg Config, topics []string) error {
	opts, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return fmt.Errorf("broker: %q is not a Redis URL (redis://host:port/db): %w", cfg.URL, err)
	}
	rdb := redis.NewClient(opts)
	defer func() { _ = rdb.Close() }()
	var streams []string
	for _, topic := range topics {
		for _, t := range cfg.partitions(topic) {
			streams = append(streams, cfg.stream(t))
		}
	}
	if err := rdb.Del(ctx, streams...).Err(); err != nil {
		return fmt.Errorf("broker: delete the streams at %s: %w", cfg.URL, err)
	}
	return nil
}

// publisher publishes to the namespace's streams.
func (r *redisBackend) publisher() message.Publisher { return namespaced{cfg: r.cfg, pub: r.pub} }

func (r *redisBackend) subscriber(group string) (message.Subscriber, error) {
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		// Subscriber.Close closes the client it is given.
		Client:        redis.NewClient(r.opts),
		ConsumerGroup: group,
		// Each subscriber is a consumer of the group under a random name.
		// Entries another consumer has held unacknowledged for AckWait (it
		// was SIGKILLed, or is slow) are claimed, looked for four times
		// per AckWait. watermill-redisstream's defaults, 60s and 5s, would
		// leave a killed process's entries waiting past the demo's end.
		MaxIdleTime:   r.cfg.AckWait,
		ClaimInterval: r.cfg.AckWait / 4,
		// Without it the first read blocks in Redis until an entry comes,
		// and Close cannot end it.
		DisableIndefiniteInitialBlock: true,
	}, r.log)
	if err != nil {
		return nil, err
	}
	return namespaced{cfg: r.cfg, sub: sub}, nil
}

func (r *redisBackend) backlog(ctx context.Context, topic, group string) (int, error) {
	stream := r.cfg.stream(topic)
	n, err := r.rdb.XLen(ctx, stream).Result()
	if err != nil || n == 0 {
		return 0, err
	}
	groups, err := r.rdb.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return 0, err
	}
	for _, g := range groups {
		if g.Name != group {
			continue
		}
		if g.Lag < 0 {
			return 0, fmt.Errorf("broker: Redis cannot tell how far group %s lags on stream %s (entries were deleted)", group, stream)
		}
		return int(g.Lag + g.Pending), nil
	}
	return int(n), nil // no subscriber of the group yet
}

func (r *redisBackend) close() { _ = r.rdb.Close() }

// namespaced is a publisher or subscriber of topics whose streams are named
// in the namespace (Config.stream).
type namespaced struct {
	cfg Config
	pub message.Publisher
	sub message.Subscriber
}

func (n namespaced) Publish(topic string, msgs ...*message.Message) error {
	return n.pub.Publish(n.cfg.stream(topic), msgs...)
}

func (n namespaced) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	return n.sub.Subscribe(ctx, n.cfg.stream(topic))
}

func (n namespaced) Close() error {
	if n.pub != nil {
		return n.pub.Close()
	}
	return n.sub.Close()
}
