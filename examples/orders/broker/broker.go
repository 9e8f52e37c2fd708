// Package broker connects the example's services to a message broker
// through Watermill: watermill-sql on the services' own PostgreSQL by
// default (nothing else to install), or NATS JetStream.
//
// pgbox never talks to the broker itself. The relay publishes through any
// Watermill message.Publisher and watermillinbox stores what any Watermill
// message.Subscriber delivers, so switching brokers is this package's
// business alone: the services do not change.
//
// A Broker keeps everything it creates under one namespace, so that runs
// and tests sharing a database or a NATS server never see each other's
// messages: the PostgreSQL schema of watermill-sql's tables, or the prefix
// of the NATS streams.
package broker

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgbox/pgbox/examples/orders/ddl"
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
	// holding watermill-sql's tables, or the prefix of NATS stream names
	// (streams are named <Namespace>_<topic>). Defaults to NamespaceDefault.
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
	// on Pool, or a NATS URL ("nats://127.0.0.1:4222") for NATS JetStream.
	// Defaults to PostgresURL.
	URL string
}

// Broker is a connection to the broker: a publisher, and subscribers on
// demand. Create one with Open and Close it when done.
type Broker struct {
	cfg Config

	// Publisher publishes to any topic, each message to one of the topic's
	// partitions. The relay uses it.
	Publisher message.Publisher

	db       *sql.DB    // watermill-sql only
	nc       *nats.Conn // NATS only
	js       jetstream.JetStream
	wmLogger watermill.LoggerAdapter
}

// Open connects to the broker and creates what topics need (watermill-sql
// tables, NATS streams), if missing. Several processes may Open the same
// broker at once.
func Open(ctx context.Context, cfg Config, topics ...string) (*Broker, error) {
	cfg = cfg.withDefaults()
	b := &Broker{cfg: cfg, wmLogger: watermill.NewSlogLogger(cfg.Logger)}
	var err error
	switch {
	case cfg.URL == PostgresURL:
		err = b.openSQL(ctx, topics)
	case strings.HasPrefix(cfg.URL, "nats://"):
		err = b.openNATS(ctx, topics)
	default:
		err = fmt.Errorf("broker: unknown broker %q: use %q (watermill-sql on the same PostgreSQL) or a nats:// URL", cfg.URL, PostgresURL)
	}
	if err != nil {
		b.Close()
		return nil, err
	}
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
	sub, err := b.subscriber(group)
	if err != nil {
		return nil, err
	}
	return partitionedSubscriber{b: b, sub: sub}, nil
}

func (b *Broker) subscriber(group string) (message.Subscriber, error) {
	if b.nc != nil {
		return wmnats.NewSubscriber(wmnats.SubscriberConfig{
			AckWaitTimeout:  b.cfg.AckWait,
			ConfigureStream: b.streamConfig,
			ConsumeOptions:  []jetstream.PullConsumeOpt{jetstream.PullMaxMessages(32)},
			// A connection of its own: closing the subscriber drains it.
			Logger:              b.wmLogger,
			ResourceInitializer: b.groupConsumer(group),
			URL:                 b.cfg.URL,
		})
	}
	schema, offsets := b.sqlAdapters()
	return wmsql.NewSubscriber(b.db, wmsql.SubscriberConfig{
		AckDeadline:    &b.cfg.AckWait,
		ConsumerGroup:  group,
		OffsetsAdapter: offsets,
		PollInterval:   b.cfg.PollInterval,
		ResendInterval: 50 * time.Millisecond,
		RetryInterval:  100 * time.Millisecond,
		SchemaAdapter:  schema,
	}, b.wmLogger)
}

// Backlog returns how many of the topic's messages the group has not
// acknowledged yet: waiting, or delivered and in flight. Zero means the
// group has consumed everything published so far.
func (b *Broker) Backlog(ctx context.Context, topic, group string) (int, error) {
	total := 0
	for _, t := range b.partitions(topic) {
		n, err := b.backlog(ctx, t, group)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

func (b *Broker) backlog(ctx context.Context, topic, group string) (int, error) {
	if b.nc != nil {
		c, err := b.js.Consumer(ctx, b.stream(topic), consumerName(group, b.stream(topic)))
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			info, err := b.js.Stream(ctx, b.stream(topic))
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
	schema, offsets := b.sqlAdapters()
	var n int
	err := b.db.QueryRowContext(ctx, `
		SELECT count(*) FROM `+schema.MessagesTable(topic)+` AS m
		LEFT JOIN `+offsets.MessagesOffsetsTable(topic)+` AS o ON o.consumer_group = $1
		WHERE o.consumer_group IS NULL
		   OR m.transaction_id > o.last_processed_transaction_id
		   OR (m.transaction_id = o.last_processed_transaction_id AND m."offset" > o.offset_acked)`, group).Scan(&n)
	return n, err
}

// Reset deletes everything the broker holds in its namespace (the schema, or
// the streams of topics), for a fresh run. cfg.Pool is required for
// PostgresURL.
func Reset(ctx context.Context, cfg Config, topics ...string) error {
	cfg = cfg.withDefaults()
	if cfg.URL == PostgresURL {
		_, err := cfg.Pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{cfg.Namespace}.Sanitize()+" CASCADE")
		return err
	}
	nc, err := nats.Connect(cfg.URL)
	if err != nil {
		return fmt.Errorf("broker: connect to %s: %w", cfg.URL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	b := &Broker{cfg: cfg}
	for _, topic := range topics {
		for _, t := range b.partitions(topic) {
			if err := js.DeleteStream(ctx, b.stream(t)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("broker: delete stream %s: %w", b.stream(t), err)
			}
		}
	}
	return nil
}

// Close closes the publisher and the broker connection.
func (b *Broker) Close() {
	if b.Publisher != nil {
		_ = b.Publisher.Close()
	}
	if b.db != nil {
		_ = b.db.Close()
	}
	if b.nc != nil {
		b.nc.Close()
	}
}

// openSQL sets up watermill-sql: one table per topic and one offsets table
// per topic, in the namespace schema.
func (b *Broker) openSQL(ctx context.Context, topics []string) error {
	if b.cfg.Pool == nil {
		return errors.New("broker: Config.Pool is required for watermill-sql")
	}
	b.db = stdlib.OpenDBFromPool(b.cfg.Pool)
	schema, offsets := b.sqlAdapters()
	// Every process of the example opens the broker at start-up. The
	// CREATE … IF NOT EXISTS statements are not safe to run concurrently
	// (two creators can collide in the catalog), so they take turns
	// (ddl.InTurn). watermill-sql's own AutoInitializeSchema would run them
	// unguarded, from each publisher and subscriber.
	err := ddl.InTurn(ctx, b.cfg.Pool, "pgbox-example-broker:"+b.cfg.Namespace, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{b.cfg.Namespace}.Sanitize()); err != nil {
			return err
		}
		for _, topic := range topics {
			for _, t := range b.partitions(topic) {
				for _, q := range append(schema.SchemaInitializingQueries(t), offsets.SchemaInitializingQueries(t)...) {
					if _, err := tx.Exec(ctx, q.Query, q.Args...); err != nil {
						return fmt.Errorf("create the tables of topic %s: %w", t, err)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	pub, err := wmsql.NewPublisher(b.db, wmsql.PublisherConfig{SchemaAdapter: schema}, b.wmLogger)
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	b.Publisher = partitionedPublisher{b: b, pub: pub}
	return nil
}

// sqlAdapters name watermill-sql's tables inside the namespace schema. The
// payload column is BYTEA rather than watermill-sql's default JSON: pgbox
// payloads are bytes, and JSON would reformat them, so the inbox would see
// different bytes on a redelivery.
func (b *Broker) sqlAdapters() (wmsql.DefaultPostgreSQLSchema, wmsql.DefaultPostgreSQLOffsetsAdapter) {
	table := func(name string) string {
		return pgx.Identifier{b.cfg.Namespace, name}.Sanitize()
	}
	return wmsql.DefaultPostgreSQLSchema{
			GenerateMessagesTableName: func(topic string) string { return table("watermill_" + topic) },
			GeneratePayloadType:       func(string) string { return "BYTEA" },
			// A subscriber reads a batch in one transaction that holds its
			// consumer group's offset row locked, and acknowledges the
			// batch at its end: smaller batches mean fewer redeliveries
			// after a SIGKILL and shorter waits for the group's other
			// subscribers.
			SubscribeBatchSize: 20,
		}, wmsql.DefaultPostgreSQLOffsetsAdapter{
			GenerateMessagesOffsetsTableName: func(topic string) string { return table("watermill_offsets_" + topic) },
		}
}

// openNATS connects to NATS JetStream and creates one stream per topic.
func (b *Broker) openNATS(ctx context.Context, topics []string) error {
	nc, err := nats.Connect(b.cfg.URL, nats.Name("pgbox orders example"))
	if err != nil {
		return fmt.Errorf("broker: connect to %s: %w", b.cfg.URL, err)
	}
	b.nc = nc
	if b.js, err = jetstream.New(nc); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	for _, topic := range topics {
		for _, t := range b.partitions(topic) {
			if _, err := b.js.CreateOrUpdateStream(ctx, b.streamConfig(t)); err != nil {
				return fmt.Errorf("broker: create stream %s: %w", b.stream(t), err)
			}
		}
	}
	pub, err := wmnats.NewPublisher(wmnats.PublisherConfig{Conn: nc, ConfigureStream: b.streamConfig, Logger: b.wmLogger})
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	b.Publisher = partitionedPublisher{b: b, pub: pub}
	return nil
}

func (b *Broker) stream(topic string) string { return b.cfg.Namespace + "_" + topic }

func (b *Broker) streamConfig(topic string) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: b.stream(topic), Subjects: []string{b.stream(topic)}}
}

// groupConsumer is a durable JetStream consumer shared by every subscriber
// of the group, with the short AckWait the demo needs. (Watermill's
// GroupedConsumer names the stream after the topic itself and keeps NATS's
// 30-second AckWait.)
func (b *Broker) groupConsumer(group string) wmnats.ResourceInitializer {
	return func(ctx context.Context, js jetstream.JetStream, topic string) (jetstream.Consumer, func(context.Context, watermill.LoggerAdapter), error) {
		stream, err := js.Stream(ctx, b.stream(topic))
		if err != nil {
			return nil, nil, fmt.Errorf("stream for topic %s: %w", topic, err)
		}
		c, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       b.cfg.AckWait,
			Durable:       consumerName(group, b.stream(topic)),
			MaxAckPending: 256,
		})
		return c, nil, err
	}
}

func consumerName(group, stream string) string { return "pgbox__" + group + "__" + stream }
