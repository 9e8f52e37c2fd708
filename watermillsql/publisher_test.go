package watermillsql_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	pgbox "github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
	"github.com/pgbox/pgbox/watermillsql"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// bundle is a test's schema, its outbox, and watermill-sql's tables in
// the same schema.
type bundle struct {
	pool   *pgxpool.Pool
	schema string
	box    *outbox.Outbox
	tables wmsql.DefaultPostgreSQLSchema
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{pool: pgtest.Pool(t), schema: pgtest.Schema(t)}
	var err error
	b.box, err = outbox.New(b.pool, outbox.Config{Schema: b.schema})
	require.NoError(t, err)
	b.tables = wmsql.DefaultPostgreSQLSchema{GenerateMessagesTableName: func(topic string) string {
		return ident.Quote(b.schema) + "." + ident.Quote("watermill_"+topic)
	}}
	return b
}

func (b *bundle) sql(q string) string { return ident.Render(q, b.schema) }

// createTable makes topic's table, as watermill-sql's subscribers would.
func (b *bundle) createTable(t *testing.T, topic string) {
	t.Helper()
	for _, q := range b.tables.SchemaInitializingQueries(topic) {
		_, err := b.pool.Exec(context.Background(), q.Query, q.Args...)
		require.NoError(t, err)
	}
}

func (b *bundle) write(t *testing.T, msgs ...outbox.Message) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) (err error) {
		ids, err = b.box.Write(context.Background(), tx, msgs...)
		return err
	}))
	return ids
}

func (b *bundle) publisher(t *testing.T) *watermillsql.Publisher {
	t.Helper()
	pub, err := watermillsql.NewPublisher(b.pool, watermillsql.Config{Schema: b.tables, InitializeSchema: true})
	require.NoError(t, err)
	return pub
}

func (b *bundle) startRelay(t *testing.T, cfg relay.Config) *relay.Relay {
	t.Helper()
	cfg.Schema = b.schema
	cfg.PollOnly = true
	cfg.PollInterval = 10 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(logtest.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := relay.New(b.pool, cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
	return r
}

// waitSettled waits until no outbox row waits to be published.
func (b *bundle) waitSettled(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, b.pool.QueryRow(context.Background(), b.sql("SELECT count(*) FROM /* schema */outbox WHERE status IN ('pending', 'running')")).Scan(&waiting))
		return waiting == 0
	}, 30*time.Second, 10*time.Millisecond)
}

// copies returns how many times each message id is in topic's table.
func (b *bundle) copies(t *testing.T, topic string) map[string]int {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), "SELECT uuid, count(*) FROM "+b.tables.MessagesTable(topic)+" GROUP BY uuid")
	require.NoError(t, err)
	got := map[string]int{}
	var (
		id string
		n  int
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error { got[id] = n; return nil })
	require.NoError(t, err)
	return got
}

// once is ids, each once.
func once(ids []uuid.UUID) map[string]int {
	m := make(map[string]int, len(ids))
	for _, id := range ids {
		m[id.String()] = 1
	}
	return m
}

// What the relay publishes through the publisher, watermill-sql's own
// Subscriber reads: every row once, under its id, with its payload and
// metadata, in commit order per ordering key, from a JSON and a BYTEA
// payload column.
func TestWatermillSubscriberReadsWhatTheRelayPublishes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.tables.GeneratePayloadType = func(topic string) string {
		if topic == "raw" {
			return "BYTEA"
		}
		return "JSON"
	}
	var sent []outbox.Message
	for i := range 30 {
		sent = append(sent, outbox.Message{Topic: "orders", EventType: "OrderPlaced", OrderingKey: fmt.Sprintf("c%d", i%3),
			Payload: fmt.Appendf(nil, `{"order": %d}`, i), Metadata: map[string]string{"trace": fmt.Sprint(i)}})
	}
	sent = append(sent, outbox.Message{Topic: "raw", EventType: "Blob", Payload: []byte{0, 1, 2, 0xff}})
	ids := b.write(t, sent...)
	b.startRelay(t, relay.Config{Publisher: b.publisher(t)})
	b.waitSettled(t)

	db := stdlib.OpenDBFromPool(b.pool)
	t.Cleanup(func() { _ = db.Close() })
	offsets := wmsql.DefaultPostgreSQLOffsetsAdapter{GenerateMessagesOffsetsTableName: func(topic string) string {
		return ident.Quote(b.schema) + "." + ident.Quote("watermill_offsets_"+topic)
	}}
	sub, err := wmsql.NewSubscriber(db, wmsql.SubscriberConfig{ConsumerGroup: "test", SchemaAdapter: b.tables, OffsetsAdapter: offsets,
		InitializeSchema: true, PollInterval: 10 * time.Millisecond}, watermill.NopLogger{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	read := func(topic string, n int) []*message.Message {
		ch, err := sub.Subscribe(ctx, topic)
		require.NoError(t, err)
		var got []*message.Message
		for len(got) < n {
			select {
			case m := <-ch:
				m.Ack()
				got = append(got, m)
			case <-ctx.Done():
				t.Fatalf("topic %s: read %d of %d messages", topic, len(got), n)
			}
		}
		return got
	}
	// In commit order per ordering key: the relay's workers publish
	// different keys' rows in batches of their own, which commit in
	// either order.
	index := make(map[string]int, len(ids))
	for i, id := range ids {
		index[id.String()] = i
	}
	last := map[string]int{}
	for _, m := range read("orders", 30) {
		i, ok := index[m.UUID]
		require.True(t, ok, "message %s was not written", m.UUID)
		require.JSONEq(t, string(sent[i].Payload), string(m.Payload))
		require.Equal(t, "OrderPlaced", m.Metadata.Get(pgbox.MetadataEventType))
		key := m.Metadata.Get(pgbox.MetadataOrderingKey)
		require.Equal(t, sent[i].OrderingKey, key)
		require.Equal(t, fmt.Sprint(i), m.Metadata.Get("trace"))
		if prev, ok := last[key]; ok {
			require.Greater(t, i, prev, "key %s: message %d read after message %d, against commit order", key, i, prev)
		}
		last[key] = i
	}
	raw := read("raw", 1)
	require.Equal(t, ids[30].String(), raw[0].UUID)
	require.Equal(t, []byte{0, 1, 2, 0xff}, []byte(raw[0].Payload))
	require.Equal(t, once(ids[:30]), b.copies(t, "orders"))
}

// The messages are written in the relay's batch transaction. Outcomes
// that cannot be recorded for a while keep them in it; a batch
// transaction cut before it commits takes them with it, and its rows are
// published again: whatever happens, each row's message is in the table
// once, never twice and never lost.
func TestEachMessageIsWrittenOnceThroughRefusalsAndACutTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	msgs := make([]outbox.Message, 20)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "orders", EventType: "OrderPlaced", Payload: []byte(`{}`)}
	}
	ids := b.write(t, msgs...)
	pub := b.publisher(t)
	_, _, err := pub.PublishQuery("orders") // its table, made now, so the test can read it at once
	require.NoError(t, err)
	stopRefusing := pgtest.Refuse(t, b.pool, b.schema, "outcomes refused", "BEFORE UPDATE ON /* schema */outbox",
		"NEW.published_at IS NOT NULL AND OLD.published_at IS NULL")
	// One worker, so that one batch takes every row: two workers claiming
	// at once can share them, and a batch not yet cut would then record
	// its rows once the refusal stops.
	r := b.startRelay(t, relay.Config{Publisher: pub, Workers: 1})
	t.Cleanup(stopRefusing) // before the relay's Stop, which waits for the outcomes

	// The batch has written its messages, and cannot record their rows
	// published: its transaction stays open, and nobody else sees them.
	require.Eventually(t, func() bool { return r.RecordErr() != nil }, 30*time.Second, time.Millisecond)
	require.Empty(t, b.copies(t, "orders"))
	// Cut it: whoever holds a lock on the messages' table is the batch.
	var cut int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_locks
		WHERE relation = $1::regclass AND mode = 'RowExclusiveLock' AND pid <> pg_backend_pid()`, b.tables.MessagesTable("orders")).Scan(&cut))
	require.Equal(t, 1, cut)
	stopRefusing()

	b.waitSettled(t)
	require.Equal(t, once(ids), b.copies(t, "orders"))
	var lost int
	require.NoError(t, b.pool.QueryRow(ctx, b.sql(`SELECT count(*) FROM /* schema */outbox
		WHERE status = 'published' AND attempts = 2`)).Scan(&lost))
	require.Equal(t, 20, lost, "the cut batch's attempt is counted")
}

// A message its topic's table refuses (here, a payload that is not JSON
// for a JSON column) fails alone: its row is charged with the database's
// error, and its neighbours of the batch are published once. The
// refused statement is made again by halves, so finding the bad row among
// 64 takes 13 statements, not one a row.
func TestARefusedMessageFailsAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var statements atomic.Int32
	b.pool = pgtest.TracedPool(t, b.pool, pgtest.QueryArgs(func(sql string, _ []any) {
		if strings.HasPrefix(sql, "INSERT INTO "+b.tables.MessagesTable("orders")) {
			statements.Add(1)
		}
	}))
	msgs := make([]outbox.Message, 64)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "orders", EventType: "OrderPlaced", Payload: fmt.Appendf(nil, `{"n": %d}`, i)}
	}
	msgs[37].Payload = []byte("not json")
	ids := b.write(t, msgs...)
	b.startRelay(t, relay.Config{Publisher: b.publisher(t), MaxAttempts: 1, Workers: 1})
	b.waitSettled(t)

	var (
		status, lastErr string
	)
	require.NoError(t, b.pool.QueryRow(context.Background(), b.sql("SELECT status, last_error FROM /* schema */outbox WHERE id = $1"), ids[37]).
		Scan(&status, &lastErr))
	require.Equal(t, "dead", status)
	require.Contains(t, lastErr, "invalid input syntax for type json")
	want := once(ids)
	delete(want, ids[37].String())
	require.Equal(t, want, b.copies(t, "orders"))
	require.EqualValues(t, 13, statements.Load(), "the batch's, then two for each halving")
}

// Publish, outside a relay, writes a call's messages in one statement of
// its own; a topic that cannot name a table, and a closed publisher, are
// errors that say so, and write nothing.
func TestPublishOutsideTheRelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := b.publisher(t)
	m1, m2 := message.NewMessage(uuid.NewString(), []byte(`{"a": 1}`)), message.NewMessage(uuid.NewString(), []byte(`{"b": 2}`))
	m1.Metadata.Set("k", "v")
	require.NoError(t, pub.Publish("orders", m1, m2))
	require.Equal(t, map[string]int{m1.UUID: 1, m2.UUID: 1}, b.copies(t, "orders"))
	var md string
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT metadata::text FROM "+b.tables.MessagesTable("orders")+" WHERE uuid = $1", m1.UUID).Scan(&md))
	var got map[string]string
	require.NoError(t, json.Unmarshal([]byte(md), &got))
	require.Equal(t, map[string]string{"k": "v"}, got)

	require.ErrorContains(t, pub.Publish(`orders"; DROP TABLE x; --`, m1), `a topic name is letters, digits and - $ : . _ only`)
	bad := message.NewMessage(uuid.NewString(), []byte("not json"))
	require.ErrorContains(t, pub.Publish("orders", m1, bad), "invalid input syntax for type json")
	require.Equal(t, map[string]int{m1.UUID: 1, m2.UUID: 1}, b.copies(t, "orders"), "all or none")

	require.NoError(t, pub.Close())
	err := pub.Publish("orders", m1)
	require.ErrorContains(t, err, "the publisher is closed")
	require.True(t, relay.IsUnreachable(err), "a relay left running on a closed publisher spends no attempts")
	require.Equal(t, map[string]int{m1.UUID: 1, m2.UUID: 1}, b.copies(t, "orders"))
}

// A topic with no table (InitializeSchema off) is refused like any
// statement, even though its statement fails before it runs (pgx
// prepares it first): its rows are charged, and the rows of the batch
// published before it, here after a refusal of their own, keep their
// messages.
func TestATopicWithNoTableIsRefusedAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.createTable(t, "orders")
	msgs := make([]outbox.Message, 0, 9)
	for i := range 6 {
		msgs = append(msgs, outbox.Message{Topic: "orders", EventType: "OrderPlaced", Payload: fmt.Appendf(nil, `{"n": %d}`, i)})
	}
	msgs[2].Payload = []byte("not json")
	for range 3 {
		msgs = append(msgs, outbox.Message{Topic: "ghost", EventType: "E", Payload: []byte(`{}`)})
	}
	ids := b.write(t, msgs...)
	pub, err := watermillsql.NewPublisher(b.pool, watermillsql.Config{Schema: b.tables})
	require.NoError(t, err)
	b.startRelay(t, relay.Config{Publisher: pub, MaxAttempts: 1})
	b.waitSettled(t)

	want := once(ids[:6])
	delete(want, ids[2].String())
	require.Equal(t, want, b.copies(t, "orders"))
	rows, err := b.pool.Query(ctx, b.sql("SELECT id, status, coalesce(last_error, '') FROM /* schema */outbox"))
	require.NoError(t, err)
	type outcome struct{ status, err string }
	got := map[uuid.UUID]outcome{}
	var (
		id uuid.UUID
		o  outcome
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &o.status, &o.err}, func() error { got[id] = o; return nil })
	require.NoError(t, err)
	for i, id := range ids {
		switch {
		case i == 2:
			require.Equal(t, "dead", got[id].status)
			require.Contains(t, got[id].err, "invalid input syntax for type json")
		case i >= 6:
			require.Equal(t, "dead", got[id].status)
			require.Contains(t, got[id].err, "does not exist")
		default:
			require.Equal(t, "published", got[id].status, "row %d", i)
		}
	}
}

// Creators of the same topic's table at once (this publisher in several
// processes, watermill-sql's subscribers) collide in PostgreSQL's
// catalog, IF NOT EXISTS notwithstanding. The publisher's creation
// survives it: every publish succeeds, with its message in the table.
func TestConcurrentCreatorsOfATableDoNotFailAPublish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const topics, publishers, others = 8, 4, 4
	var g errgroup.Group
	var want sync.Map
	for i := range topics {
		topic := fmt.Sprintf("t%d", i)
		for range publishers {
			pub := b.publisher(t)
			g.Go(func() error {
				m := message.NewMessage(uuid.NewString(), []byte(`{}`))
				want.Store(m.UUID, topic)
				return pub.Publish(topic, m)
			})
		}
		for range others {
			// watermill-sql's subscribers create the table unguarded; their
			// collisions are theirs, and not this test's to assert.
			g.Go(func() error {
				for _, q := range b.tables.SchemaInitializingQueries(topic) {
					_, _ = b.pool.Exec(ctx, q.Query, q.Args...)
				}
				return nil
			})
		}
	}
	require.NoError(t, g.Wait())
	for i := range topics {
		topic := fmt.Sprintf("t%d", i)
		mine := map[string]int{}
		want.Range(func(id, tp any) bool {
			if tp == topic {
				mine[id.(string)] = 1
			}
			return true
		})
		require.Equal(t, mine, b.copies(t, topic), "topic %s", topic)
	}
}

// A statement slower than PublishTimeout, here one that waits on a lock
// a migration holds on the table (as pgx prepares it, in the query modes
// that prepare, or as it runs), is ended by the server, and the relay
// holds its rows back uncharged, as it does a broker's call that gets no
// answer: the batch transaction is kept, nothing is lost, and once the
// lock is gone every row is published once, on its first counted attempt.
func TestAStatementSlowerThanPublishTimeoutChargesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.createTable(t, "orders")
	migration, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = migration.Rollback(ctx) }()
	_, err = migration.Exec(ctx, "LOCK TABLE "+b.tables.MessagesTable("orders")+" IN SHARE MODE")
	require.NoError(t, err)
	msgs := make([]outbox.Message, 20)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "orders", EventType: "OrderPlaced", Payload: fmt.Appendf(nil, `{"n": %d}`, i)}
	}
	ids := b.write(t, msgs...)
	r := b.startRelay(t, relay.Config{Publisher: b.publisher(t), PublishTimeout: 300 * time.Millisecond, MaxAttempts: 1,
		OutageBackoffFunc: func(int) time.Duration { return 50 * time.Millisecond }})
	require.Eventually(t, func() bool { return r.BrokerErr() != nil }, 30*time.Second, time.Millisecond, "the slow statement is reported")
	require.NoError(t, migration.Rollback(ctx))
	b.waitSettled(t)

	require.Equal(t, once(ids), b.copies(t, "orders"))
	var published, attempts int
	require.NoError(t, b.pool.QueryRow(ctx, b.sql("SELECT count(*) FILTER (WHERE status = 'published'), max(attempts) FROM /* schema */outbox")).
		Scan(&published, &attempts))
	require.Equal(t, len(ids), published, "a slow statement is no failure of the messages (MaxAttempts 1)")
	require.Equal(t, 1, attempts)
}

// A relay left running on a publisher closed before it was stopped
// reports an outage and charges no row: the rows wait, pending, with no
// attempt counted.
func TestARelayOnAClosedPublisherChargesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.createTable(t, "orders")
	pub := b.publisher(t)
	require.NoError(t, pub.Close())
	r := b.startRelay(t, relay.Config{Publisher: pub, MaxAttempts: 1,
		OutageBackoffFunc: func(int) time.Duration { return 10 * time.Millisecond }})
	b.write(t, outbox.Message{Topic: "orders", EventType: "OrderPlaced", Payload: []byte(`{}`)},
		outbox.Message{Topic: "orders", EventType: "OrderPlaced", Payload: []byte(`{}`)})
	require.Eventually(t, func() bool { return errors.Is(r.BrokerErr(), relay.ErrPublisherClosed) }, 30*time.Second, time.Millisecond)
	var waiting int
	require.NoError(t, b.pool.QueryRow(ctx, b.sql("SELECT count(*) FROM /* schema */outbox WHERE status = 'pending' AND attempts = 0")).Scan(&waiting))
	require.Equal(t, 2, waiting, "no row charged, none dead (MaxAttempts 1)")
	require.Empty(t, b.copies(t, "orders"))
}
