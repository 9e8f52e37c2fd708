package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgbox/pgbox/rabbitmq"
	"github.com/pgbox/pgbox/relay"
)

// The raw publishers of the relay cases: each broker's own Go client,
// publishing a claimed batch with the durability the pgbox relay's
// publisher waits for, pipelined within the batch.

// rawNATS publishes a batch to the JetStream stream the NATS case uses,
// all at once (PublishMsgAsync), and waits for every message's ack.
func rawNATS(url string) newRawPublisher {
	return func(ctx context.Context, _ *pgxpool.Pool) (rawPublish, func(), error) {
		js, closeStream, err := natsStream(ctx, url)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, _ pgx.Tx, msgs []rawMsg) error {
			acks := make([]natsjs.PubAckFuture, len(msgs))
			for i, m := range msgs {
				msg := &nats.Msg{Subject: m.topic, Data: m.payload, Header: nats.Header{rawIDHeader: []string{m.id}}}
				ack, err := js.PublishMsgAsync(msg)
				if err != nil {
					return err
				}
				acks[i] = ack
			}
			for _, ack := range acks {
				select {
				case <-ack.Ok():
				case err := <-ack.Err():
					return err
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}, closeStream, nil
	}
}

// rawRabbitMQ publishes a batch of persistent messages to the durable
// fanout exchange and queue the RabbitMQ case uses, on a channel of its own
// per relay worker in confirm mode, and waits for every confirm.
func rawRabbitMQ(url string) newRawPublisher {
	return func(context.Context, *pgxpool.Pool) (rawPublish, func(), error) {
		conn, err := amqp091.Dial(url)
		if err != nil {
			return nil, nil, err
		}
		closeAll := func() { _ = conn.Close(); deleteRabbitBench(url) }
		idle := make(chan *amqp091.Channel, relay.WorkersDefault)
		for i := range relay.WorkersDefault {
			ch, err := conn.Channel()
			if err == nil {
				err = ch.Confirm(false)
			}
			if err == nil && i == 0 {
				err = declareRabbitBench(ch)
			}
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			idle <- ch
		}
		return func(ctx context.Context, _ pgx.Tx, msgs []rawMsg) error {
			ch := <-idle
			defer func() { idle <- ch }()
			confirms := make([]*amqp091.DeferredConfirmation, len(msgs))
			for i, m := range msgs {
				pub := amqp091.Publishing{Headers: amqp091.Table{rawIDHeader: m.id}, DeliveryMode: amqp091.Persistent, Body: m.payload}
				c, err := ch.PublishWithDeferredConfirmWithContext(ctx, m.topic, "", false, false, pub)
				if err != nil {
					return err
				}
				confirms[i] = c
			}
			for i, c := range confirms {
				acked, err := c.WaitContext(ctx)
				if err != nil {
					return err
				}
				if !acked {
					return fmt.Errorf("RabbitMQ refused message %s", msgs[i].id)
				}
			}
			return nil
		}, closeAll, nil
	}
}

// declareRabbitBench declares what package rabbitmq declares for topic
// "bench" and consumer "bench": a durable fanout exchange and a durable
// queue bound to it.
func declareRabbitBench(ch *amqp091.Channel) error {
	q := rabbitmq.Queue("bench", "bench")
	return errors.Join(
		ch.ExchangeDeclare("bench", "fanout", true, false, false, false, nil),
		func() error { _, err := ch.QueueDeclare(q, true, false, false, false, nil); return err }(),
		ch.QueueBind(q, "", "bench", false, nil))
}

// rawKafka produces a batch to the Kafka case's in-process kfake with
// franz-go (acks from all in-sync replicas, idempotent), and waits for
// every record's ack (ProduceSync).
func rawKafka(context.Context, *pgxpool.Pool) (rawPublish, func(), error) {
	client, closeClient, err := kfakeClient()
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, _ pgx.Tx, msgs []rawMsg) error {
		recs := make([]*kgo.Record, len(msgs))
		for i, m := range msgs {
			recs[i] = &kgo.Record{Topic: m.topic, Value: m.payload, Headers: []kgo.RecordHeader{{Key: rawIDHeader, Value: []byte(m.id)}}}
		}
		return client.ProduceSync(ctx, recs...).FirstErr()
	}, closeClient, nil
}

// rawWatermillSQL inserts a batch into watermill-sql's table for the topic,
// in its own shape (what a watermill-sql subscriber reads), in one
// statement in the claiming transaction: with the broker on the same
// database, a hand-written relay's publish commits with its mark.
func rawWatermillSQL(ctx context.Context, pool *pgxpool.Pool) (rawPublish, func(), error) {
	for _, q := range watermillSQLSchema.SchemaInitializingQueries("bench") {
		if _, err := pool.Exec(ctx, q.Query, q.Args...); err != nil {
			return nil, nil, err
		}
	}
	insert := `INSERT INTO ` + watermillSQLSchema.MessagesTable("bench") + ` (uuid, payload, metadata, transaction_id)
SELECT m.id, m.payload, '{}', pg_current_xact_id() FROM unnest($1::text[], $2::bytea[]) AS m(id, payload)`
	return func(ctx context.Context, tx pgx.Tx, msgs []rawMsg) error {
		ids, payloads := make([]string, len(msgs)), make([][]byte, len(msgs))
		for i, m := range msgs {
			ids[i], payloads[i] = m.id, m.payload
		}
		_, err := tx.Exec(ctx, insert, ids, payloads)
		return err
	}, func() {}, nil
}
