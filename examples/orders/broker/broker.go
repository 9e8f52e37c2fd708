// Package broker connects the example's services to a message broker
// through Watermill: watermill-sql on the services' own PostgreSQL by
// default (nothing else to install), NATS JetStream or Redis Streams.
//
// pgbox never talks to the broker itself. The relay publishes through any
// Watermill message.Publisher and watermillinbox stores what any Watermill
// message.Subscriber delivers, so switching brokers is this package's
// business alone: the services do not change.
//
// A Broker keeps everything it creates under one namespace, so that runs
// and tests sharing a database or a NATS server never see each other's
// messages: the PostgreSQL schema of watermill-sql's tables, or the prefix
// of the NATS or Redis streams.
//
// Each broker is a file of its own (sql.go, nats.go, redis.go), which
// implements backend, and a line in kinds: adding one is a file and a
// line.
package broker

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults.
const (
	// AckWaitDefault is the default Config.AckWait.
	AckWaitDefault = 2 * time.Second
	// NamespaceDefault is the default Config.Namespace.
	NamespaceDefault = "demo_broker"
	// PartitionsDefault is the default Config.Partitions.
	PartitionsDefault = 4
	// PostgresURL selects watermill-sql on the services' PostgreSQL.
	PostgresURL = "postgres"
)

// Config says which broker to use and how.
type Config struct {
	// AckWait is how long a delivered message may stay unacknowledged
	// before the broker delivers it again: to another subscriber of the
	// group if its subscriber was killed. Keep it short in the demo, so that
	// a SIGKILLed subscriber's messages come back within the run. Defaults
	// to AckWaitDefault (2s).
	AckWait time.Duration

	// Logger receives Watermill's warnings and errors. Defaults to
	// slog.Default().
	Logger *slog.Logger

	// Namespace keeps the broker's resources apart: the PostgreSQL schema
	// holding watermill-sql's tables, or the prefix of NATS or Redis stream
	// names (streams are named <Namespace>_<topic>). Defaults to
	// NamespaceDefault.
	Namespace string

	// Partitions is how many partitions each topic is split into (see
	// partition.go): how many of a consumer group's messages may be in
	// flight at once. Every process must agree on it. Defaults to
	// PartitionsDefault (4).
	Partitions int

	// Pool is the PostgreSQL pool watermill-sql uses. Required for
	// PostgresURL.
	Pool *pgxpool.Pool

	// PollInterval is how long a watermill-sql subscriber waits before
	// looking again when it found no new message; while messages keep
	// coming it does not wait. Each look is a transaction per partition, so
	// a short interval costs CPU on both sides. Defaults to 50ms.
	PollInterval time.Duration

	// URL selects the broker: PostgresURL ("postgres") for watermill-sql
	// on Pool, a NATS URL ("nats://127.0.0.1:4222") for NATS JetStream, or
	// a Redis URL ("redis://127.0.0.1:6379/0") for Redis Streams. Defaults
	// to PostgresURL.
	URL string
}

// backend is one broker's side of a Broker: it publishes and subscribes
// to partition topics (partition.go), which Broker maps topics onto.
type backend interface {
	// publisher returns the publisher of partition topics.
	publisher() message.Publisher
	// subscriber returns a subscriber of partition topics in the consumer
	// group, redelivering what one of the group leaves unacknowledged for
	// Config.AckWait.
	subscriber(group string) (message.Subscriber, error)
	// backlog returns how many of a partition topic's messages the group
	// has not acknowledged: waiting, or delivered and in flight.
	backlog(ctx context.Context, topic, group string) (int, error)
	// close closes the connections the backend opened; the publisher is
	// closed before.
	close()
}

// kind is a broker the package can connect to.
type kind struct {
	// matches reports whether Config.URL selects this broker.
	matches func(url string) bool
	// open connects and creates what the partitions of topics need, if
	// missing. On an error it leaves nothing open.
	open func(ctx context.Context, b *Broker, topics []string) (backend, error)
	// reset deletes what the broker holds for the partitions of topics in
	// the namespace.
	reset func(ctx context.Context, cfg Config, topics []string) error
	// says is what the URL looks like, for the error naming the choices.
	says string
}

// kinds are the brokers, one file each.
var kinds = []kind{
	{matches: func(url string) bool { return url == PostgresURL }, open: openSQL, reset: resetSQL, says: fmt.Sprintf("%q (watermill-sql on the same PostgreSQL)", PostgresURL)},
	{matches: prefix("nats://"), open: openNATS, reset: resetNATS, says: "a nats:// URL (NATS JetStream)"},
	{matches: prefix("redis://"), open: openRedis, reset: resetRedis, says: "a redis:// URL (Redis Streams)"},
	{matches: prefix(sqsScheme), open: openSQS, reset: resetSQS, says: "an SQS endpoint after sqs+ (sqs+http://127.0.0.1:4100: Amazon SQS's protocol)"},
}

func prefix(p string) func(string) bool {
	return func(url string) bool { return strings.HasPrefix(url, p) }
}

// kindOf returns the broker url selects.
func kindOf(url string) (kind, error) {
	for _, k := range kinds {
		if k.matches(url) {
			return k, nil
		}
	}
	return kind{}, fmt.Errorf("broker: unknown broker %q: use %s", url, Choices())
}

// Choices says what Config.URL may be, for a flag's usage and errors.
func Choices() string {
	says := make([]string, len(kinds))
	for i, k := range kinds {
		says[i] = k.says
	}
	return strings.Join(says[:len(says)-1], ", ") + " or " + says[len(says)-1]
}

// Broker is a connection to the broker: a publisher, and subscribers on
// demand. Create one with Open and Close it when done.
type Broker struct {
	cfg Config

	// Publisher publishes to any topic, each message to one of the topic's
	// partitions. The relay uses it.
	Publisher message.Publisher

	backend  backend
	wmLogger watermill.LoggerAdapter
}

// Open connects to the broker and creates what topics need (watermill-sql
// tables, NATS streams), if missing. Several processes may Open the same
// broker at once.
func Open(ctx context.Context, cfg Config, topics ...string) (*Broker, error) {
	cfg = cfg.withDefaults()
	k, err := kindOf(cfg.URL)
	if err != nil {
		return nil, err
	}
	b := &Broker{cfg: cfg, wmLogger: watermill.NewSlogLogger(cfg.Logger)}
	if b.backend, err = k.open(ctx, b, topics); err != nil {
		return nil, err
	}
	b.Publisher = partitionedPublisher{b: b, pub: b.backend.publisher()}
	return b, nil
}

func (c Config) withDefaults() Config {
	c.AckWait = cmp.Or(c.AckWait, AckWaitDefault)
	c.Namespace = cmp.Or(c.Namespace, NamespaceDefault)
	c.Partitions = cmp.Or(c.Partitions, PartitionsDefault)
	c.PollInterval = cmp.Or(c.PollInterval, 50*time.Millisecond)
	c.URL = cmp.Or(c.URL, PostgresURL)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Subscriber returns a subscriber in the consumer group. Subscribers of one
// group share a topic's messages: each is delivered to one of them, and to
// another if it is not acknowledged within Config.AckWait (its subscriber
// was killed, say). A subscriber reads every partition of the topic at
// once, so a Watermill router handles up to Config.Partitions messages
// concurrently.
func (b *Broker) Subscriber(group string) (message.Subscriber, error) {
	sub, err := b.backend.subscriber(group)
	if err != nil {
		return nil, err
	}
	return partitionedSubscriber{b: b, sub: sub}, nil
}

// Backlog returns how many of the topic's messages the group has not
// acknowledged yet: waiting, or delivered and in flight. Zero means the
// group has consumed everything published so far.
func (b *Broker) Backlog(ctx context.Context, topic, group string) (int, error) {
	total := 0
	for _, t := range b.cfg.partitions(topic) {
		n, err := b.backend.backlog(ctx, t, group)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// Reset deletes everything the broker holds in its namespace (the schema, or
// the streams of topics), for a fresh run. cfg.Pool is required for
// PostgresURL.
func Reset(ctx context.Context, cfg Config, topics ...string) error {
	cfg = cfg.withDefaults()
	k, err := kindOf(cfg.URL)
	if err != nil {
		return err
	}
	return k.reset(ctx, cfg, topics)
}

// Close closes the publisher and the broker connection.
func (b *Broker) Close() {
	_ = b.Publisher.Close()
	b.backend.close()
}

// stream is the name of a NATS or Redis stream: the partition topic in the
// namespace.
func (c Config) stream(topic string) string { return c.Namespace + "_" + topic }
