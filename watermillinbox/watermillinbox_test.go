package watermillinbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/watermillinbox"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type testBundle struct {
	inbox  *inbox.Inbox
	pool   *pgxpool.Pool
	schema string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{pool: pgtest.Pool(t), schema: pgtest.Schema(t)}
	var err error
	b.inbox, err = inbox.New(b.pool, inbox.Config{Consumer: "payments", Schema: b.schema})
	require.NoError(t, err)
	return b
}

func (b *testBundle) count(t *testing.T, q string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), ident.Render(q, b.schema)).Scan(&n))
	return n
}

func newMessage(payload string) *message.Message {
	m := message.NewMessage(uuid.NewString(), []byte(payload))
	m.Metadata.Set(pgbox.MetadataEventType, "OrderPlaced")
	return m
}

func TestHandlerStoresOnceAndAcksDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	handle := watermillinbox.Handler(watermillinbox.Config{Inbox: b.inbox})

	m := newMessage(`{"order":1}`)
	m.Metadata.Set(pgbox.MetadataOrderingKey, "order-1")
	m.Metadata.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	require.NoError(t, handle(m))
	require.NoError(t, handle(m.Copy()), "a redelivery is acknowledged")

	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM /* schema */inbox"))
	var (
		id, eventType, key string
		metadata           map[string]string
	)
	require.NoError(t, b.pool.QueryRow(context.Background(), ident.Render(
		"SELECT message_id, event_type, ordering_key, metadata FROM /* schema */inbox", b.schema)).Scan(&id, &eventType, &key, &metadata))
	require.Equal(t, m.UUID, id, "the Watermill UUID is the dedupe key")
	require.Equal(t, "OrderPlaced", eventType)
	require.Equal(t, "order-1", key)
	require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", metadata["traceparent"], "trace context travels into the inbox")
}

func TestConflictingRedeliveryIsAckedAndRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	handle := watermillinbox.Handler(watermillinbox.Config{Inbox: b.inbox})
	m := newMessage("original")
	require.NoError(t, handle(m))

	changed := newMessage("changed")
	changed.UUID = m.UUID
	require.NoError(t, handle(changed), "redelivering a conflict could never succeed: ack it")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM /* schema */inbox_conflicts"))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM /* schema */inbox WHERE payload = 'original'"))
}

func TestDatabaseTroubleNacks(t *testing.T) {
	t.Parallel()
	in, err := inbox.New(pgtest.Pool(t), inbox.Config{Consumer: "payments", Schema: pgtest.EmptySchema(t)})
	require.NoError(t, err)
	err = watermillinbox.Handler(watermillinbox.Config{Inbox: in})(newMessage("x"))
	require.ErrorIs(t, err, pgbox.ErrSchemaNotMigrated, "nack: the broker will deliver it again")
}

func TestUnstorableMessageIsNackedAsInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t)
	handle := watermillinbox.Handler(watermillinbox.Config{Inbox: b.inbox})

	untyped := message.NewMessage(uuid.NewString(), nil) // no event type, no topic in context
	err := handle(untyped)
	require.ErrorIs(t, err, inbox.ErrInvalidMessage)
	require.ErrorContains(t, err, "EventType is empty")

	byHeader := watermillinbox.Handler(watermillinbox.Config{Inbox: b.inbox, IDFunc: watermillinbox.MetadataID("x-event-id")})
	err = byHeader(newMessage("no header"))
	require.ErrorIs(t, err, inbox.ErrInvalidMessage)
	require.ErrorContains(t, err, `metadata "x-event-id" is missing or empty`)
	require.Zero(t, b.count(t, "SELECT count(*) FROM /* schema */inbox"))
}

func TestDedupeKeyFromAHeader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	handle := watermillinbox.Handler(watermillinbox.Config{Inbox: b.inbox, IDFunc: watermillinbox.MetadataID("x-event-id")})
	for range 3 {
		m := newMessage("same event") // a new Watermill UUID each time, as a non-pgbox producer retrying would send
		m.Metadata.Set("x-event-id", "evt-42")
		require.NoError(t, handle(m))
	}
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM /* schema */inbox WHERE message_id = 'evt-42'"))
}

// In a real router, with every message delivered twice (Watermill's
// Duplicator middleware), each is stored once; without an event type in
// its metadata, a message is stored under its topic.
func TestInARouterWithDuplicatedDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, logger)
	t.Cleanup(func() { _ = pubSub.Close() })

	router, err := message.NewRouter(message.RouterConfig{}, logger)
	require.NoError(t, err)
	router.AddMiddleware(middleware.Duplicator)
	router.AddConsumerHandler("payments-inbox", "orders.placed", pubSub, watermillinbox.Handler(watermillinbox.Config{Inbox: b.inbox}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	<-router.Running()

	for i := range 20 {
		require.NoError(t, pubSub.Publish("orders.placed", message.NewMessage(uuid.NewString(), []byte(fmt.Sprint(i)))))
	}
	require.Eventually(t, func() bool {
		return b.count(t, "SELECT count(*) FROM /* schema */inbox") == 20
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 20, b.count(t, "SELECT count(*) FROM /* schema */inbox WHERE event_type = 'orders.placed'"))
}

// A producer that is not Watermill sends no UUID: the key comes from a
// payload field, a string or a number, nested or not.
func TestDedupeKeyFromAPayloadField(t *testing.T) {
	t.Parallel()
	b := setup(t)
	handle := watermillinbox.Handler(watermillinbox.Config{Inbox: b.inbox, IDFunc: watermillinbox.PayloadID("order.id")})
	for _, payload := range []string{`{"order":{"id":"o-1"}}`, `{"order":{"id":"o-1"}}`, `{"order":{"id":7}}`} {
		m := newMessage(payload)
		m.UUID = ""
		require.NoError(t, handle(m))
	}
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM /* schema */inbox WHERE message_id = 'o-1'"))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM /* schema */inbox WHERE message_id = '7'"))

	for payload, reason := range map[string]string{
		`not json`:               "payload is not JSON",
		`{"order":{}}`:           `payload field "order.id" is missing or null`,
		`{"order":"o-1"}`:        `payload field "order.id" is missing`,
		`{"order":{"id":""}}`:    "not a non-empty string or a number",
		`{"order":{"id":[1,2]}}`: "not a non-empty string or a number",
	} {
		err := handle(newMessage(payload))
		require.ErrorIs(t, err, inbox.ErrInvalidMessage, payload)
		require.ErrorContains(t, err, reason, payload)
	}
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM /* schema */inbox"))
}

// With a poison route, a message that can never be stored is published
// there with the reason and acknowledged, so the messages behind it flow
// on; without one, or when the poison publish fails, it is nacked.
func TestUnstorableMessageGoesToThePoisonTopic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	poison := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	t.Cleanup(func() { _ = poison.Close() })
	handle := watermillinbox.Handler(watermillinbox.Config{
		IDFunc:          watermillinbox.MetadataID("x-event-id"),
		Inbox:           b.inbox,
		PoisonPublisher: poison,
		PoisonTopic:     "orders.poison",
	})
	bad := newMessage("no id")
	require.NoError(t, handle(bad))
	good := newMessage("has an id")
	good.Metadata.Set("x-event-id", "evt-1")
	require.NoError(t, handle(good))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM /* schema */inbox"))

	msgs, err := poison.Subscribe(context.Background(), "orders.poison")
	require.NoError(t, err)
	select {
	case m := <-msgs:
		m.Ack()
		require.Equal(t, bad.UUID, m.UUID)
		require.Equal(t, "no id", string(m.Payload))
		require.Contains(t, m.Metadata.Get(middleware.ReasonForPoisonedKey), `metadata "x-event-id" is missing or empty`)
	case <-time.After(10 * time.Second):
		t.Fatal("nothing on the poison topic")
	}

	require.NoError(t, poison.Close())
	err = handle(newMessage("no id either"))
	require.ErrorIs(t, err, inbox.ErrInvalidMessage)
	require.ErrorContains(t, err, `publishing it to poison topic "orders.poison" failed`)

	require.PanicsWithValue(t, "watermillinbox: set both Config.PoisonPublisher and Config.PoisonTopic, or neither", func() {
		watermillinbox.Handler(watermillinbox.Config{Inbox: b.inbox, PoisonTopic: "orders.poison"})
	})
}

// A message that can never be stored, nacked for want of a poison route,
// comes back for ever (on Kafka, at once, stopping its partition): the
// handler says so at error level through Config.Logger, naming the fix,
// once per cause, not once per redelivery nor once per message with the
// same fault. Before, the only text was the error it returned, logged by
// Watermill's router: "ID is empty: set it".
func TestStuckMessageIsLoggedOncePerCause(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logs := &logtest.Recorder{}
	handle := watermillinbox.Handler(watermillinbox.Config{Inbox: b.inbox, Logger: slog.New(logs)})
	const stuck = "a message that can never be stored is nacked"

	// A foreign producer's records carry no Watermill UUID.
	foreign := func() *message.Message { return newMessage(`{"n":1}`) }
	noUUID := foreign()
	noUUID.UUID = ""
	for range 5 {
		err := handle(noUUID.Copy())
		require.ErrorIs(t, err, inbox.ErrInvalidMessage)
		require.ErrorContains(t, err, "no Watermill UUID")
		require.ErrorContains(t, err, "Config.IDFunc")
	}
	another := foreign()
	another.UUID = ""
	require.Error(t, handle(another))
	recs := logs.Records(slog.LevelError, stuck)
	require.Len(t, recs, 1, "one cause, one line")
	require.Contains(t, recs[0].Message, "Config.IDFunc")
	require.Contains(t, recs[0].Message, "Config.PoisonPublisher")
	require.Equal(t, "payments", attr(recs[0], "consumer"))
	require.Contains(t, attr(recs[0], "error"), "no Watermill UUID")

	// Another cause, shared by two messages: one more line, without the
	// IDFunc advice, which does not apply.
	for range 3 {
		for _, untyped := range []*message.Message{message.NewMessage(uuid.NewString(), nil), message.NewMessage(uuid.NewString(), nil)} {
			require.ErrorContains(t, handle(untyped), "EventType is empty")
		}
	}
	recs = logs.Records(slog.LevelError, stuck)
	require.Len(t, recs, 2)
	require.NotContains(t, recs[1].Message, "IDFunc")
	require.Contains(t, attr(recs[1], "error"), "EventType is empty")
	require.Zero(t, b.count(t, "SELECT count(*) FROM /* schema */inbox"))
}

// attr returns the value of r's attribute key, as a string.
func attr(r slog.Record, key string) (v string) {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

// Config.IDTimeFunc dates a key that is no UUIDv7: the message goes to the
// partition of that time's day, and its redelivery is a duplicate. Without
// it the key is undated (generation 0); a UUIDv7 key keeps its own day
// whatever the function returns.
func TestIDTimeFuncDatesTheKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var now time.Time
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT now()").Scan(&now))
	sentAt := func(m *message.Message) time.Time {
		at, _ := time.Parse(time.RFC3339Nano, m.Metadata.Get("sent_at"))
		return at
	}
	dated := watermillinbox.Handler(watermillinbox.Config{Inbox: b.inbox, IDFunc: watermillinbox.UUIDOr(watermillinbox.MetadataID("message_id")), IDTimeFunc: sentAt})
	undated := watermillinbox.Handler(watermillinbox.Config{Inbox: b.inbox, IDFunc: watermillinbox.MetadataID("message_id")})
	foreign := func(id string, at time.Time) *message.Message {
		m := message.NewMessage("", []byte("{}"))
		m.Metadata.Set(pgbox.MetadataEventType, "OrderPlaced")
		m.Metadata.Set("message_id", id)
		m.Metadata.Set("sent_at", at.Format(time.RFC3339Nano))
		return m
	}
	yesterday := now.Add(-24 * time.Hour)
	relayed := newMessage("{}") // from pgbox's relay: a UUIDv7 key, with a broker time of another day
	relayed.UUID = uuid.Must(uuid.NewV7()).String()
	relayed.Metadata.Set("sent_at", yesterday.Add(-24*time.Hour).Format(time.RFC3339Nano))

	require.NoError(t, dated(foreign("sqs-1", now)))
	require.NoError(t, dated(foreign("sqs-1", now)), "a redelivery")
	require.NoError(t, undated(foreign("sqs-2", now)))
	require.NoError(t, dated(relayed))
	where := func(id string) string {
		var p string
		require.NoError(t, b.pool.QueryRow(context.Background(), ident.Render(
			"SELECT string_agg(tableoid::regclass::text, ',') FROM /* schema */inbox WHERE message_id = $1", b.schema), id).Scan(&p))
		return p
	}
	day := func(t time.Time) string { return t.UTC().Format("20060102") }
	require.Contains(t, where("sqs-1"), "inbox_d"+day(now))
	require.Contains(t, where("sqs-2"), "inbox_g0")
	require.Contains(t, where(relayed.UUID), "inbox_d"+day(now), "a UUIDv7 is dated by its own time")
	require.Equal(t, 3, b.count(t, "SELECT count(*) FROM /* schema */inbox"))
}

// Many calls at once, each message delivered twice by different callers,
// as concurrent subscriptions would: every call acknowledges, and each
// message is stored once.
func TestConcurrentCallsStoreEachMessageOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	handle := watermillinbox.Handler(watermillinbox.Config{Inbox: b.inbox})
	const callers, each = 16, 50
	msgs := make([]*message.Message, callers*each/2)
	for i := range msgs {
		msgs[i] = newMessage(fmt.Sprintf(`{"n":%d}`, i))
	}
	var g errgroup.Group
	for c := range callers {
		g.Go(func() error {
			for i := range each {
				if err := handle(msgs[(c/2*each+i)%len(msgs)].Copy()); err != nil {
					return err
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	require.Equal(t, len(msgs), b.count(t, "SELECT count(*) FROM /* schema */inbox"))
}
