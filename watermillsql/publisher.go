// Package watermillsql publishes to watermill-sql's PostgreSQL Pub/Sub on
// the outbox's own database, from the relay's batch transaction: a
// message is in its topic's table once if its outbox row is recorded
// published, and not at all otherwise. No duplicate, and no commit or
// connection of its own (but for creating a topic's table, with
// InitializeSchema).
//
// The rows have the shape watermill-sql's DefaultPostgreSQLSchema writes
// and its Subscriber reads: uuid, payload, metadata as JSON, and the
// writing transaction's id. Subscribers need no change.
//
//	pub, _ := watermillsql.NewPublisher(pool, watermillsql.Config{InitializeSchema: true})
//	r, _ := relay.New(pool, relay.Config{Publisher: pub})
//
// The relay must run on the database whose tables the subscribers read.
package watermillsql

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	wmsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgbox/pgbox/relay"
)

// Config configures a Publisher.
type Config struct {
	// Schema names each topic's table and the type of its payload column,
	// as the subscribers' SchemaAdapter does: give the same value.
	// Defaults to watermill-sql's: table "watermill_<topic>" in the
	// search path, payload JSON.
	Schema wmsql.DefaultPostgreSQLSchema
	// InitializeSchema creates a topic's table, if it does not exist, the
	// first time the publisher publishes to it, as watermill-sql's
	// AutoInitializeSchema does. Otherwise a publish to a topic with no
	// table fails, and its rows are charged an attempt.
	//
	// The creation survives another creator of the same table at once
	// (PostgreSQL's CREATE TABLE IF NOT EXISTS does not: the two collide
	// in its catalog; this publisher tries again). watermill-sql's subscribers do not: a Subscribe
	// with InitializeSchema that runs while the relay first publishes to
	// its topic can fail with unique_violation. Subscribe before the
	// relay starts, or create the tables beforehand.
	InitializeSchema bool
}

// A Publisher writes messages to watermill-sql's tables. Given to a relay,
// it is a relay.TxPublisher: its statement runs in the relay's batch
// transaction. Publish, for other callers, writes in a transaction of its
// own. It is safe for concurrent use.
type Publisher struct {
	pool *pgxpool.Pool
	cfg  Config

	mu      sync.Mutex
	closed  bool
	queries map[string]string // each topic's statement, once its table was made (InitializeSchema)
}

// NewPublisher returns a Publisher that writes through pool, whose
// database must hold the subscribers' tables.
func NewPublisher(pool *pgxpool.Pool, cfg Config) (*Publisher, error) {
	if pool == nil {
		return nil, errors.New("watermillsql: NewPublisher needs a pool: the outbox's database, where the subscribers read")
	}
	return &Publisher{pool: pool, cfg: cfg, queries: map[string]string{}}, nil
}

var _ relay.TxPublisher = (*Publisher)(nil)

// topicName is what watermill-sql allows in a topic name: it becomes part
// of a table name.
var topicName = regexp.MustCompile(`^[A-Za-z0-9\-$:._]+$`)

// PublishQuery returns the statement that inserts msgs into topic's table,
// in one statement, and its arguments. With InitializeSchema, it first
// creates the table, in a transaction of its own, if this publisher has
// not yet.
func (p *Publisher) PublishQuery(topic string, msgs ...*message.Message) (string, []any, error) {
	q, err := p.query(topic)
	if err != nil {
		return "", nil, err
	}
	ids, payloads, metadata := make([]string, len(msgs)), make([][]byte, len(msgs)), make([]string, len(msgs))
	for i, m := range msgs {
		md, err := json.Marshal(m.Metadata)
		if err != nil {
			return "", nil, fmt.Errorf("watermillsql: message %s: metadata as JSON: %w", m.UUID, err)
		}
		ids[i], payloads[i], metadata[i] = m.UUID, m.Payload, string(md)
	}
	return q, []any{ids, payloads, metadata}, nil
}

// query returns topic's statement, its table created first if need be.
// The table is created outside the publisher's lock: a slow creation
// holds up only the publishes to its own topic.
func (p *Publisher) query(topic string) (string, error) {
	if !topicName.MatchString(topic) {
		return "", fmt.Errorf("watermillsql: topic %q: a topic name is letters, digits and - $ : . _ only (it becomes part of a table name, as in watermill-sql)", topic)
	}
	p.mu.Lock()
	q, ok := p.queries[topic]
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return "", errClosed
	}
	if ok {
		return q, nil
	}
	if p.cfg.InitializeSchema {
		if err := p.createTable(topic); err != nil {
			return "", err
		}
	}
	q = insertSQL(p.cfg.Schema.MessagesTable(topic), p.cfg.Schema.PayloadColumnType(topic))
	p.mu.Lock()
	p.queries[topic] = q
	p.mu.Unlock()
	return q, nil
}

// errClosed is the error of a publish after Close.
var errClosed = fmt.Errorf("watermillsql: %w", relay.ErrPublisherClosed)

// createTable runs the schema's CREATE … IF NOT EXISTS statements for
// topic in a transaction of its own. Two creators of the same table at
// once collide in PostgreSQL's catalog (unique_violation), IF NOT EXISTS
// notwithstanding: the loser ran while the winner's creation was
// uncommitted, and the winner has committed by the time the error comes.
// So a creation that collides runs again, and finds the table there.
func (p *Publisher) createTable(topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), initTimeout)
	defer cancel()
	create := func() error {
		return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			for _, q := range p.cfg.Schema.SchemaInitializingQueries(topic) {
				if _, err := tx.Exec(ctx, q.Query, q.Args...); err != nil {
					return err
				}
			}
			return nil
		})
	}
	err := create()
	for try := 1; try < createTries && collided(err); try++ {
		err = create()
	}
	if err != nil {
		return fmt.Errorf("watermillsql: create the table of topic %q: %w", topic, err)
	}
	return nil
}

// createTries bounds the runs of a topic's table creation that collide
// with another creator's.
const createTries = 3

// collided reports whether err is a creation's collision with a
// concurrent creator of the same catalog entry: a unique_violation in
// the catalog, or the object found existing by a statement without IF
// NOT EXISTS.
func collided(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P07" || pgErr.Code == "42710")
}

// initTimeout bounds the creation of a topic's table. The relay's batch
// transaction waits meanwhile, idle, which its lease bounds too
// (relay.Config.Lease).
const initTimeout = 10 * time.Second

// insertSQL inserts a batch of messages into table, whose payload column
// has type payloadType: bytes as they are into a BYTEA column, decoded as
// UTF-8 text and cast for any other (JSON, JSONB, TEXT), as watermill-sql
// sends them. transaction_id is the writer's, which watermill-sql's
// subscribers read to find rows committed out of order.
func insertSQL(table, payloadType string) string {
	payload := "m.payload"
	if !strings.EqualFold(strings.TrimSpace(payloadType), "BYTEA") {
		payload = "convert_from(m.payload, 'UTF8')::" + payloadType
	}
	return `INSERT INTO ` + table + ` (uuid, payload, metadata, transaction_id)
SELECT m.id, ` + payload + `, m.metadata::json, pg_current_xact_id()
FROM unnest($1::text[], $2::bytea[], $3::text[]) AS m(id, payload, metadata)`
}

// Publish writes msgs to topic's table, all of them or none, in a
// transaction of its own.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	q, args, err := p.PublishQuery(topic, msgs...)
	if err != nil {
		return err
	}
	if _, err := p.pool.Exec(context.Background(), q, args...); err != nil {
		return fmt.Errorf("watermillsql: publish to topic %q: %w", topic, err)
	}
	return nil
}

// Close makes later publishes fail. It does not close the pool, which is
// the caller's.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return nil
}
