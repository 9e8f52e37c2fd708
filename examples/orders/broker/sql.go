package broker

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgbox/pgbox/examples/orders/ddl"
)

// sqlBackend is watermill-sql on the services' PostgreSQL: one table per
// topic and one offsets table per topic, in the namespace schema.
type sqlBackend struct {
	cfg Config
	db  *sql.DB
	log watermill.LoggerAdapter
	pub message.Publisher
}

// openSQL sets up watermill-sql's tables for topics.
func openSQL(ctx context.Context, b *Broker, topics []string) (backend, error) {
	if b.cfg.Pool == nil {
		return nil, errors.New("broker: Config.Pool is required for watermill-sql")
	}
	s := &sqlBackend{cfg: b.cfg, db: stdlib.OpenDBFromPool(b.cfg.Pool), log: b.wmLogger}
	schema, offsets := s.adapters()
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
			for _, t := range b.cfg.partitions(topic) {
				for _, q := range append(schema.SchemaInitializingQueries(t), offsets.SchemaInitializingQueries(t)...) {
					if _, err := tx.Exec(ctx, q.Query, q.Args...); err != nil {
						return fmt.Errorf("create the tables of topic %s: %w", t, err)
					}
				}
			}
		}
		return nil
	})
	if err == nil {
		s.pub, err = wmsql.NewPublisher(s.db, wmsql.PublisherConfig{SchemaAdapter: schema}, s.log)
	}
	if err != nil {
		_ = s.db.Close()
		return nil, fmt.Errorf("broker: %w", err)
	}
	return s, nil
}

func resetSQL(ctx context.Context, cfg Config, _ []string) error {
	if cfg.Pool == nil {
		return errors.New("broker: Config.Pool is required for watermill-sql")
	}
	_, err := cfg.Pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{cfg.Namespace}.Sanitize()+" CASCADE")
	return err
}

func (s *sqlBackend) publisher() message.Publisher { return s.pub }

func (s *sqlBackend) subscriber(group string) (message.Subscriber, error) {
	schema, offsets := s.adapters()
	return wmsql.NewSubscriber(s.db, wmsql.SubscriberConfig{
		AckDeadline:    &s.cfg.AckWait,
		ConsumerGroup:  group,
		OffsetsAdapter: offsets,
		PollInterval:   s.cfg.PollInterval,
		ResendInterval: 50 * time.Millisecond,
		RetryInterval:  100 * time.Millisecond,
		SchemaAdapter:  schema,
	}, s.log)
}

func (s *sqlBackend) backlog(ctx context.Context, topic, group string) (int, error) {
	schema, offsets := s.adapters()
	var n int
	err := s.db.QueryRowContext(ctx, `
		SELECT count(*) FROM `+schema.MessagesTable(topic)+` AS m
		LEFT JOIN `+offsets.MessagesOffsetsTable(topic)+` AS o ON o.consumer_group = $1
		WHERE o.consumer_group IS NULL
		   OR m.transaction_id > o.last_processed_transaction_id
		   OR (m.transaction_id = o.last_processed_transaction_id AND m."offset" > o.offset_acked)`, group).Scan(&n)
	return n, err
}

func (s *sqlBackend) close() { _ = s.db.Close() }

// adapters name watermill-sql's tables inside the namespace schema. The
// payload column is BYTEA rather than watermill-sql's default JSON: pgbox
// payloads are bytes, and JSON would reformat them, so the inbox would see
// different bytes on a redelivery.
func (s *sqlBackend) adapters() (wmsql.DefaultPostgreSQLSchema, wmsql.DefaultPostgreSQLOffsetsAdapter) {
	table := func(name string) string {
		return pgx.Identifier{s.cfg.Namespace, name}.Sanitize()
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
