package relay_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
)

// oneByOne is a broker that takes a call's messages one at a time and
// refuses each listed message once, after taking the ones before it in
// the call: what a mid-batch failure of NATS JetStream, RabbitMQ or Kafka
// looks like to the relay. The messages it takes go to a real Watermill
// publisher.
type oneByOne struct {
	message.Publisher
	mu     sync.Mutex
	refuse map[string]bool // ids to refuse, the first time only
}

func (p *oneByOne) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		p.mu.Lock()
		refuse := p.refuse[m.UUID]
		delete(p.refuse, m.UUID)
		p.mu.Unlock()
		if refuse {
			return fmt.Errorf("broker refused message %s", m.UUID)
		}
		if err := p.Publisher.Publish(topic, m); err != nil {
			return err
		}
	}
	return nil
}

// perMessage makes a publisher a relay.ResultPublisher: it publishes a
// call's messages one at a time through it and reports each one's error.
// It counts the messages of each call.
type perMessage struct {
	message.Publisher
	mu    sync.Mutex
	calls []int // messages per call
}

func (p *perMessage) PublishResults(topic string, msgs ...*message.Message) []error {
	p.mu.Lock()
	p.calls = append(p.calls, len(msgs))
	p.mu.Unlock()
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		errs[i] = p.Publish(topic, m)
	}
	return errs
}

// largestCall returns the most messages a call has carried.
func (p *perMessage) largestCall() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Max(append(p.calls, 0))
}

// subscribe returns what a GoChannel subscriber of topic receives, in
// order: message ids, and their ordering keys.
func subscribe(t *testing.T, ps *gochannel.GoChannel, topic string) (received func() (ids, keys []string)) {
	t.Helper()
	msgs, err := ps.Subscribe(context.Background(), topic)
	require.NoError(t, err)
	var (
		mu         sync.Mutex
		ids, keys  []string
		subscribed = make(chan struct{})
	)
	go func() {
		defer close(subscribed)
		for m := range msgs { // until the GoChannel is closed
			mu.Lock()
			ids, keys = append(ids, m.UUID), append(keys, m.Metadata.Get(pgbox.MetadataOrderingKey))
			mu.Unlock()
			m.Ack()
		}
	}()
	t.Cleanup(func() { require.NoError(t, ps.Close()); <-subscribed })
	return func() ([]string, []string) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(ids), slices.Clone(keys)
	}
}

// A broker that fails part way through a publish has taken the messages
// before the failure: they are recorded published and never sent again,
// only the refused ones are charged an attempt and retried, and each key's
// messages arrive in commit order.
//
// A relay.ResultPublisher is given each topic's rows of a batch in one
// call, and the same holds: each message's outcome is its own.
func TestPartialPublishRetriesOnlyWhatFailed(t *testing.T) {
	t.Parallel()
	t.Run("one message per call", func(t *testing.T) {
		t.Parallel()
		testPartialPublish(t, func(p *oneByOne) message.Publisher { return p })
	})
	t.Run("ResultPublisher", func(t *testing.T) {
		t.Parallel()
		var results *perMessage
		testPartialPublish(t, func(p *oneByOne) message.Publisher {
			results = &perMessage{Publisher: p}
			return results
		})
		require.Greater(t, results.largestCall(), 1, "a call carries a batch's rows")
	})
}

// testPartialPublish is TestPartialPublishRetriesOnlyWhatFailed with the
// publisher wrap makes of a oneByOne broker.
func testPartialPublish(t *testing.T, wrap func(*oneByOne) message.Publisher) {
	b := setup(t)
	// Publish returns once the subscriber has the message, so the order it
	// receives is the order of publishing.
	ps := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	received := subscribe(t, ps, "orders")

	const keys, perKey, unkeyed = 4, 6, 10
	var msgs []outbox.Message
	for i := range keys * perKey {
		msgs = append(msgs, outbox.Message{Topic: "orders", EventType: "E", OrderingKey: fmt.Sprintf("k%d", i%keys)})
	}
	for range unkeyed {
		msgs = append(msgs, outbox.Message{Topic: "orders", EventType: "E"})
	}
	ids := b.write(t, msgs...)
	// Refused once each: keyed rows at the head of a batch and behind
	// others, and unkeyed ones, which share the first batch with the heads.
	refused := []uuid.UUID{ids[1], ids[9], ids[keys*perKey+3], ids[keys*perKey+7]}
	pub := &oneByOne{Publisher: ps, refuse: map[string]bool{}}
	for _, id := range refused {
		pub.refuse[id.String()] = true
	}
	b.start(t, relay.Config{Publisher: wrap(pub)})
	b.waitPublished(t)

	pub.mu.Lock()
	require.Empty(t, pub.refuse, "every listed message was refused once")
	pub.mu.Unlock()
	got, gotKeys := received()
	require.ElementsMatch(t, strs(ids), got, "each message published once: none again because a neighbour failed")
	want := map[string][]string{}
	for i, m := range msgs {
		if m.OrderingKey != "" {
			want[m.OrderingKey] = append(want[m.OrderingKey], ids[i].String())
		}
	}
	byKey := map[string][]string{}
	for i, id := range got {
		if gotKeys[i] != "" {
			byKey[gotKeys[i]] = append(byKey[gotKeys[i]], id)
		}
	}
	require.Equal(t, want, byKey, "each key in commit order")

	rows, err := b.pool.Query(context.Background(), b.sql("SELECT id::text, attempts, jsonb_array_length(errors) FROM /* schema */outbox"))
	require.NoError(t, err)
	type history struct{ attempts, errors int }
	histories := map[string]history{}
	var (
		id string
		h  history
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &h.attempts, &h.errors}, func() error { histories[id] = h; return nil })
	require.NoError(t, err)
	for _, id := range ids {
		want := history{attempts: 1}
		if slices.Contains(refused, id) {
			want = history{attempts: 2, errors: 1}
		}
		require.Equal(t, want, histories[id.String()], "message %s", id)
	}
}

// With AtomicPublisher, a watermill-sql publisher takes a topic's batch in
// one INSERT, all or nothing. When the database refuses one message (here
// a CHECK constraint on the broker's table), none went in: the relay
// publishes the batch again one message per call, so the others go in
// once and only the refused message is charged, until it is dead.
func TestAtomicPublisherBlamesTheRefusedMessageAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// watermill-sql sends its JSON metadata as bytes, which the untyped
	// query modes encode as bytea: its pool describes its statements.
	db := stdlib.OpenDBFromPool(pgtest.NewPoolMode(t, pgx.QueryExecModeCacheDescribe, 2))
	t.Cleanup(func() { _ = db.Close() })
	table := ident.Quote(b.schema) + "." + ident.Quote("watermill_orders")
	schema := wmsql.DefaultPostgreSQLSchema{
		GenerateMessagesTableName: func(string) string { return table },
		GeneratePayloadType:       func(string) string { return "BYTEA" },
	}
	sub, err := wmsql.NewSubscriber(db, wmsql.SubscriberConfig{
		ConsumerGroup: "test",
		OffsetsAdapter: wmsql.DefaultPostgreSQLOffsetsAdapter{GenerateMessagesOffsetsTableName: func(string) string {
			return ident.Quote(b.schema) + "." + ident.Quote("watermill_offsets_orders")
		}},
		SchemaAdapter: schema,
	}, watermill.NopLogger{})
	require.NoError(t, err)
	require.NoError(t, sub.SubscribeInitialize("orders"))
	require.NoError(t, sub.Close())
	_, err = b.pool.Exec(context.Background(), "ALTER TABLE "+table+" ADD CONSTRAINT small CHECK (octet_length(payload) <= 100)")
	require.NoError(t, err)
	pub, err := wmsql.NewPublisher(db, wmsql.PublisherConfig{SchemaAdapter: schema}, watermill.NopLogger{})
	require.NoError(t, err)

	msgs := make([]outbox.Message, 12)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "orders", EventType: "E", Payload: []byte(fmt.Sprint(i))}
	}
	msgs[5].Payload = []byte(strings.Repeat("x", 200))
	ids := b.write(t, msgs...)
	// One worker, so that one claim takes the twelve rows and the order
	// of the calls is the test's to check: two workers' claims may split
	// them (each skipping the rows the other has locked), and the relay
	// promises no order between rows without an ordering key.
	b.start(t, relay.Config{AtomicPublisher: true, MaxAttempts: 2, Publisher: pub, Workers: 1})
	b.waitPublished(t)

	var inBroker []string
	rows, err := b.pool.Query(context.Background(), `SELECT uuid FROM `+table+` ORDER BY "offset"`)
	require.NoError(t, err)
	inBroker, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, strs(append(ids[:5:5], ids[6:]...)), inBroker, "the others, once each, in commit order")

	var (
		status    string
		attempts  int
		lastError string
	)
	require.NoError(t, b.pool.QueryRow(context.Background(), b.sql("SELECT status, attempts, last_error FROM /* schema */outbox WHERE id = $1"), ids[5]).
		Scan(&status, &attempts, &lastError))
	require.Equal(t, "dead", status)
	require.Equal(t, 2, attempts)
	require.Contains(t, lastError, "small")
	var charged int
	require.NoError(t, b.pool.QueryRow(context.Background(), b.sql("SELECT count(*) FROM /* schema */outbox WHERE attempts > 1")).Scan(&charged))
	require.Equal(t, 1, charged, "only the refused message is charged")
}
