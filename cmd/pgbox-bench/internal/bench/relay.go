package bench

import (
	"cmp"
	"context"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/outboxdrain"
	"github.com/pgbox/pgbox/internal/proccpu"
	"github.com/pgbox/pgbox/kafka"
	pgnatsjs "github.com/pgbox/pgbox/natsjs"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/rabbitmq"
	"github.com/pgbox/pgbox/relay"
	"github.com/pgbox/pgbox/watermillsql"
)

// loadOutbox writes n outbox rows to topic, 1000 per transaction.
func loadOutbox(ctx context.Context, pool *pgxpool.Pool, out *outbox.Outbox, topic string, n int) error {
	for from := 0; from < n; from += 1000 {
		msgs := make([]outbox.Message, 0, 1000)
		for range min(1000, n-from) {
			msgs = append(msgs, outbox.Message{Topic: topic, Payload: benchPayload})
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := out.Write(ctx, tx, msgs...)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// waitOutboxDone waits until every outbox row is published
// (outboxdrain.Wait).
func waitOutboxDone(ctx context.Context, pool *pgxpool.Pool) error {
	return outboxdrain.Wait(ctx, pool, pgboxSchemaName)
}

// newPublisher makes the publisher a relay case publishes through, on the
// case's pool where it needs one, and returns it with what closes it.
type newPublisher func(ctx context.Context, pool *pgxpool.Pool) (message.Publisher, func(), error)

// relayShape is how a relay case runs the relay: the zero value is one
// relay with relay.Config's defaults.
type relayShape struct {
	// atomic tells the relay that the publisher takes a call's messages
	// all or none (relay.Config.AtomicPublisher), so it publishes a
	// batch's rows in one call instead of one per call.
	atomic bool
	// workers is relay.Config.Workers; 0 for the default.
	workers int
}

// relayDrain publishes a pre-written outbox of n rows through the
// publisher newPub makes (closed after), with a relay of the given shape,
// and reports rows per second.
func (e *env) relayDrain(n int, newPub newPublisher, shape relayShape) func(context.Context, scale) (Figures, error) {
	return func(ctx context.Context, s scale) (Figures, error) {
		n := s.n(n)
		r, err := e.loadedOutbox(ctx, n, cmp.Or(shape.workers, relay.WorkersDefault)+6)
		if err != nil {
			return nil, err
		}
		defer r.close()
		pub, closePub, err := newPub(ctx, r.pool)
		if err != nil {
			return nil, err
		}
		defer closePub()
		rel, err := relay.New(r.pool, relay.Config{AtomicPublisher: shape.atomic, Schema: pgboxSchemaName, Publisher: pub, Workers: shape.workers,
			Logger: e.log, ListenConnConfig: e.listen, PollOnly: e.pollOnly})
		if err != nil {
			return nil, err
		}
		cpu0 := readCPU()
		start := time.Now()
		if err := rel.Start(ctx); err != nil {
			return nil, err
		}
		defer rel.Stop(context.WithoutCancel(ctx))
		if err := waitOutboxDone(ctx, r.pool); err != nil {
			return nil, err
		}
		return cpu0.perMessage(Figures{"msgs/s": float64(n) / time.Since(start).Seconds()}, n), nil
	}
}

// cpuSample is the CPU time used so far by the bench's process (the
// relay's Go side, the broker's client, and an in-process broker) and by
// every PostgreSQL process on this machine (0 if the server runs
// elsewhere).
type cpuSample struct{ process, postgres time.Duration }

func readCPU() cpuSample {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return cpuSample{process: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), postgres: proccpu.AllPostgres()}
}

// perMessage adds to f the CPU time used since s per message, of n.
func (s cpuSample) perMessage(f Figures, n int) Figures {
	now := readCPU()
	f["process CPU µs/msg"] = float64((now.process - s.process).Microseconds()) / float64(n)
	if now.postgres > 0 {
		f["PostgreSQL CPU µs/msg"] = float64((now.postgres - s.postgres).Microseconds()) / float64(n)
	}
	return f
}

// loadedOutbox makes the schema afresh, on a pool of conns connections,
// with an outbox of n rows to the topic "bench", vacuumed.
func (e *env) loadedOutbox(ctx context.Context, n, conns int) (*rig, error) {
	r, err := e.newRig(ctx, conns)
	if err != nil {
		return nil, err
	}
	out, err := outbox.New(r.pool, outbox.Config{Schema: pgboxSchemaName})
	if err == nil {
		err = loadOutbox(ctx, r.pool, out, "bench", n)
	}
	if err == nil {
		err = vacuum(ctx, r.pool, pgboxSchemaName, "outbox")
	}
	if err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// goChannel is an in-process Watermill publisher with a subscriber that
// takes everything: the relay's own cost, with no broker behind it.
func goChannel(ctx context.Context, _ *pgxpool.Pool) (message.Publisher, func(), error) {
	ps := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 10_000}, watermill.NopLogger{})
	msgs, err := ps.Subscribe(ctx, "bench")
	if err != nil {
		return nil, nil, err
	}
	go func() {
		for m := range msgs {
			m.Ack()
		}
	}()
	return ps, func() { _ = ps.Close() }, nil
}

// natsJetStream publishes to a JetStream stream of its own, deleted after,
// through pgbox's natsjs publisher (a batch per call, its acknowledgements
// awaited together), as docs/operations.md advises for a relay.
func natsJetStream(url string) newPublisher {
	return func(ctx context.Context, _ *pgxpool.Pool) (message.Publisher, func(), error) {
		nc, err := nats.Connect(url)
		if err != nil {
			return nil, nil, err
		}
		_, closeStream, err := natsStream(ctx, url)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		pub, err := pgnatsjs.NewPublisher(nc, pgnatsjs.Config{})
		if err != nil {
			closeStream()
			nc.Close()
			return nil, nil, err
		}
		return pub, func() { _ = pub.Close(); nc.Close(); closeStream() }, nil
	}
}

// natsStream connects to the NATS at url and makes the stream the relay
// cases publish to (subject "bench"), and returns the connection's
// JetStream with what deletes the stream and closes the connection.
func natsStream(ctx context.Context, url string) (natsjs.JetStream, func(), error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, nil, err
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	if _, err := js.CreateOrUpdateStream(ctx, natsjs.StreamConfig{Name: "pgbox_bench", Subjects: []string{"bench"}}); err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, func() {
		_ = js.DeleteStream(context.Background(), "pgbox_bench")
		nc.Close()
	}, nil
}

// watermillSQL publishes to Watermill's PostgreSQL Pub/Sub on the same
// database, in a table of the bench schema: the zero-extra-server broker.
func watermillSQL(_ context.Context, pool *pgxpool.Pool) (message.Publisher, func(), error) {
	db := stdlib.OpenDBFromPool(pool)
	pub, err := wmsql.NewPublisher(db, wmsql.PublisherConfig{
		AutoInitializeSchema: true,
		SchemaAdapter:        watermillSQLSchema,
	}, watermill.NopLogger{})
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return pub, func() { _ = pub.Close(); _ = db.Close() }, nil
}

// watermillSQLInTx publishes to the same tables through pgbox's
// watermillsql publisher: in the relay's batch transaction.
func watermillSQLInTx(_ context.Context, pool *pgxpool.Pool) (message.Publisher, func(), error) {
	pub, err := watermillsql.NewPublisher(pool, watermillsql.Config{Schema: watermillSQLSchema, InitializeSchema: true})
	if err != nil {
		return nil, nil, err
	}
	return pub, func() { _ = pub.Close() }, nil
}

// watermillSQLSchema keeps watermill-sql's messages of a topic in table
// watermill_<topic> of the bench schema, payloads as bytes.
var watermillSQLSchema = wmsql.DefaultPostgreSQLSchema{
	GenerateMessagesTableName: func(topic string) string {
		return ident.Quote(pgboxSchemaName) + "." + ident.Quote("watermill_"+topic)
	},
	GeneratePayloadType: func(string) string { return "BYTEA" },
}

// rabbitMQ publishes through package rabbitmq (publisher confirms, the
// consumer's queue declared first) to a queue of its own, deleted after.
func rabbitMQ(url string) newPublisher {
	return func(context.Context, *pgxpool.Pool) (message.Publisher, func(), error) {
		pub, err := rabbitmq.NewPublisher(url, []string{"bench"}, watermill.NopLogger{})
		if err != nil {
			return nil, nil, err
		}
		return pub, func() { _ = pub.Close(); deleteRabbitBench(url) }, nil
	}
}

// deleteRabbitBench deletes the exchange and queue the RabbitMQ relay
// cases publish to.
func deleteRabbitBench(url string) {
	if conn, err := amqp091.Dial(url); err == nil {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(rabbitmq.Queue("bench", "bench"), false, false, false)
			_ = ch.ExchangeDelete("bench", false, false)
		}
		_ = conn.Close()
	}
}

// kafkaFranz publishes through package kafka's FranzPublisher (franz-go,
// a batch's records produced together, acks from all in-sync replicas,
// idempotent: the raw system's client with its defaults) to franz-go's
// in-process kfake broker, a topic of 4 partitions keyed by kafka.Key: no
// real Kafka's disk or network, so it measures the relay and the client,
// not a cluster.
func kafkaFranz(context.Context, *pgxpool.Pool) (message.Publisher, func(), error) {
	client, closeClient, err := kfakeClient()
	if err != nil {
		return nil, nil, err
	}
	pub, err := kafka.NewFranzPublisher(kafka.FranzConfig{Client: client})
	if err != nil {
		closeClient()
		return nil, nil, err
	}
	return pub, func() { _ = pub.Close(); closeClient() }, nil
}

// kafkaSarama publishes through package kafka's Publisher (Sarama, a
// batch's messages sent together) to the same in-process kfake.
func kafkaSarama(context.Context, *pgxpool.Pool) (message.Publisher, func(), error) {
	cluster, err := kfakeCluster()
	if err != nil {
		return nil, nil, err
	}
	pub, err := kafka.NewPublisher(wmkafka.PublisherConfig{Brokers: cluster.ListenAddrs(), Marshaler: kafka.Marshaler()})
	if err != nil {
		cluster.Close()
		return nil, nil, err
	}
	return pub, func() { _ = pub.Close(); cluster.Close() }, nil
}

// kfakeClient starts the in-process Kafka (kfakeCluster) and returns a
// franz-go client of it, with its defaults, and what closes both.
func kfakeClient() (*kgo.Client, func(), error) {
	cluster, err := kfakeCluster()
	if err != nil {
		return nil, nil, err
	}
	client, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		cluster.Close()
		return nil, nil, err
	}
	return client, func() { client.Close(); cluster.Close() }, nil
}

// kfakeCluster starts the in-process Kafka the Kafka relay cases publish
// to: one broker, topic "bench" of 4 partitions.
func kfakeCluster() (*kfake.Cluster, error) {
	return kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "bench"))
}
