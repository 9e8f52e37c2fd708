package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/outbox"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type testBundle struct {
	outbox *outbox.Outbox
	pool   *pgxpool.Pool
	schema string
}

func setup(t *testing.T, cfg outbox.Config) *testBundle {
	t.Helper()
	return setupOn(t, pgtest.Pool(t), cfg)
}

// setupOn is setup with the Outbox, and the test's own queries, on pool.
func setupOn(t *testing.T, pool *pgxpool.Pool, cfg outbox.Config) *testBundle {
	t.Helper()
	b := &testBundle{pool: pool, schema: pgtest.Schema(t)}
	cfg.Schema = b.schema
	var err error
	b.outbox, err = outbox.New(b.pool, cfg)
	require.NoError(t, err)
	return b
}

// inTx runs fn in a transaction and commits it, or rolls it back if fn
// fails or commit is false.
func (b *testBundle) inTx(t *testing.T, commit bool, fn func(tx pgx.Tx) error) error {
	t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	if err := fn(tx); err != nil {
		return err
	}
	if commit {
		return tx.Commit(ctx)
	}
	return nil
}

type outboxRow struct {
	EventType   string
	ID          uuid.UUID
	Metadata    map[string]string
	OrderingKey *string
	Payload     []byte
	Seq         int64
	Status      string
	Topic       string
}

func (b *testBundle) rows(t *testing.T) []outboxRow {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), ident.Render(
		"SELECT event_type, id, metadata, ordering_key, payload, seq, status, topic FROM /* schema */outbox ORDER BY seq", b.schema))
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxRow, error) {
		var o outboxRow
		err := r.Scan(&o.EventType, &o.ID, &o.Metadata, &o.OrderingKey, &o.Payload, &o.Seq, &o.Status, &o.Topic)
		return o, err
	})
	require.NoError(t, err)
	return out
}

func TestWriteFollowsTheBusinessTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, outbox.Config{})
	msgs := []outbox.Message{
		{Topic: "orders", EventType: "OrderPlaced", Payload: []byte(`{"order":1}`), OrderingKey: "order-1", Metadata: map[string]string{"tenant": "acme"}},
		{Topic: "orders", Payload: []byte{0, 1, 2, 0xff}},
	}

	require.NoError(t, b.inTx(t, false, func(tx pgx.Tx) error {
		_, err := b.outbox.Write(ctx, tx, msgs...)
		return err
	}))
	require.Empty(t, b.rows(t), "a rolled-back transaction writes nothing")

	var ids []uuid.UUID
	require.NoError(t, b.inTx(t, true, func(tx pgx.Tx) error {
		var err error
		ids, err = b.outbox.Write(ctx, tx, msgs...)
		return err
	}))
	require.Len(t, ids, 2)
	for _, id := range ids {
		require.Equal(t, uuid.Version(7), id.Version(), "ids are UUIDv7")
	}
	require.Less(t, ids[0].String(), ids[1].String(), "UUIDv7 ids are time-ordered")

	rows := b.rows(t)
	require.Len(t, rows, 2)
	require.Equal(t, ids[0], rows[0].ID)
	require.Equal(t, "OrderPlaced", rows[0].EventType)
	require.Equal(t, "order-1", *rows[0].OrderingKey)
	require.Equal(t, map[string]string{"tenant": "acme"}, rows[0].Metadata)
	require.Equal(t, "pending", rows[0].Status)
	require.Equal(t, "orders", rows[1].EventType, "the event type defaults to the topic")
	require.Nil(t, rows[1].OrderingKey)
	require.Equal(t, []byte{0, 1, 2, 0xff}, rows[1].Payload)
}

func TestWriteRejectsBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, outbox.Config{MaxPayloadBytes: 8})
	good := outbox.Message{Topic: "orders", Payload: []byte("ok")}

	for want, bad := range map[string]outbox.Message{
		"Topic is empty":                      {},
		"Topic is 256 bytes":                  {Topic: strings.Repeat("t", 256)},
		"EventType contains a NUL character":  {Topic: "t", EventType: "a\x00"},
		"OrderingKey is not valid UTF-8":      {Topic: "t", OrderingKey: "\xff"},
		"payload is 9 bytes, over the 8-byte": {Topic: "t", Payload: make([]byte, 9)},
		`metadata "k" holds a NUL character`:  {Topic: "t", Metadata: map[string]string{"k": "\x00"}},
		`metadata "k" holds invalid UTF-8`:    {Topic: "t", Metadata: map[string]string{"k": "\xfe"}},
	} {
		err := b.inTx(t, true, func(tx pgx.Tx) error {
			_, err := b.outbox.Write(ctx, tx, good, bad)
			return err
		})
		require.ErrorIs(t, err, outbox.ErrInvalidMessage, want)
		require.ErrorContains(t, err, "invalid outbox message 1")
		require.ErrorContains(t, err, want)
	}
	require.Empty(t, b.rows(t), "one bad message writes nothing, its neighbours included")
}

// A reused id is refused by either statement: the first Write of the hour
// notifies (the batch statement), the next ones do not (a single message
// without a key goes in by a plain INSERT), and a keyed one takes the batch
// statement again.
func TestWriteRefusesAReusedID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, outbox.Config{NotifyInterval: time.Hour})
	id := uuid.Must(uuid.NewV7())
	write := func(key string) error {
		return b.inTx(t, true, func(tx pgx.Tx) error {
			_, err := b.outbox.Write(ctx, tx, outbox.Message{ID: id, Topic: "t", OrderingKey: key})
			return err
		})
	}
	require.NoError(t, write(""))
	require.ErrorContains(t, write(""), "a message id is already in the outbox")
	require.ErrorContains(t, write("k"), "a message id is already in the outbox")
	require.Len(t, b.rows(t), 1)
}

// A single message is stored alike whether its Write notifies (the batch
// statement, on the leading edge of the NotifyInterval) or not (a plain
// INSERT for a message without a key).
func TestWriteStoresASingleMessageAlikeOnEitherPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, outbox.Config{NotifyInterval: time.Hour})
	m := outbox.Message{Topic: "orders", EventType: "OrderPlaced", Payload: []byte{0, 1, 0xff}, Metadata: map[string]string{"tenant": "acme"}}
	for range 2 {
		require.NoError(t, b.inTx(t, true, func(tx pgx.Tx) error {
			_, err := b.outbox.Write(ctx, tx, m)
			return err
		}))
	}
	rows := b.rows(t)
	require.Len(t, rows, 2)
	require.NotEqual(t, rows[0].ID, rows[1].ID)
	require.Less(t, rows[0].Seq, rows[1].Seq)
	for i := range rows {
		rows[i].ID, rows[i].Seq = uuid.Nil, 0
	}
	want := outboxRow{EventType: "OrderPlaced", Metadata: map[string]string{"tenant": "acme"}, Payload: []byte{0, 1, 0xff}, Status: "pending", Topic: "orders"}
	require.Equal(t, []outboxRow{want, want}, rows)
}

// Write works on a pool whose query mode sends parameters without their
// types, as a user behind PgBouncer may configure: both paths, the
// array one (many messages, a key, a NOTIFY) and the single message.
func TestWriteInUntypedQueryModes(t *testing.T) {
	t.Parallel()
	for _, mode := range pgtest.UntypedModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupOn(t, pgtest.NewPoolMode(t, mode, 2), outbox.Config{NotifyInterval: time.Hour})
			msgs := make([]outbox.Message, 100)
			for i := range msgs {
				msgs[i] = outbox.Message{Topic: "orders", Payload: []byte{byte(i), 0, 0xff}, Metadata: map[string]string{"n": fmt.Sprint(i)}}
			}
			msgs[1].OrderingKey = "order-1"
			var ids []uuid.UUID
			require.NoError(t, b.inTx(t, true, func(tx pgx.Tx) error {
				var err error
				ids, err = b.outbox.Write(ctx, tx, msgs...) // the first Write notifies
				if err != nil {
					return err
				}
				one, err := b.outbox.Write(ctx, tx, outbox.Message{Topic: "orders", Payload: []byte("one")})
				ids = append(ids, one...)
				return err
			}))
			rows := b.rows(t)
			require.Len(t, rows, len(msgs)+1)
			for i, r := range rows[:len(msgs)] {
				require.Equal(t, ids[i], r.ID, "seq follows the order given")
				require.Equal(t, msgs[i].Payload, r.Payload)
				require.Equal(t, fmt.Sprint(i), r.Metadata["n"])
			}
			require.Equal(t, "order-1", *rows[1].OrderingKey)
			require.Equal(t, ids[len(msgs)], rows[len(msgs)].ID)
			require.Equal(t, []byte("one"), rows[len(msgs)].Payload)
		})
	}
}

// The producer's trace context travels in the metadata; a trace context
// the producer put there itself is kept.
func TestWriteCarriesTheTraceContext(t *testing.T) {
	t.Parallel()
	b := setup(t, outbox.Config{})
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled,
	}))
	own := "00-11111111111111111111111111111111-2222222222222222-01"

	require.NoError(t, b.inTx(t, true, func(tx pgx.Tx) error {
		_, err := b.outbox.Write(ctx, tx,
			outbox.Message{Topic: "t"},
			outbox.Message{Topic: "t", Metadata: map[string]string{"traceparent": own}})
		return err
	}))
	rows := b.rows(t)
	require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", rows[0].Metadata["traceparent"])
	require.Equal(t, own, rows[1].Metadata["traceparent"])
}

// Writers of one ordering key take turns until commit, so a key's seq
// order is its commit order.
func TestWritersOfOneKeyTakeTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, outbox.Config{})

	tx1, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	first, err := b.outbox.Write(ctx, tx1, outbox.Message{Topic: "t", OrderingKey: "order-7"})
	require.NoError(t, err)

	tx2, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	var pid2 uint32
	require.NoError(t, tx2.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid2))
	done := make(chan []uuid.UUID, 1)
	go func() {
		ids, err := b.outbox.Write(ctx, tx2, outbox.Message{Topic: "t", OrderingKey: "order-7"})
		if err != nil {
			ids = nil
		}
		done <- ids
	}()
	t.Cleanup(func() { _ = tx1.Rollback(ctx); <-done; _ = tx2.Rollback(ctx) })

	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted)", pid2).Scan(&waiting))
		return waiting
	}, 10*time.Second, 5*time.Millisecond, "the second writer of the key must wait for the first to commit")

	require.NoError(t, tx1.Commit(ctx))
	second := <-done
	done <- second
	require.NotNil(t, second)
	require.NoError(t, tx2.Commit(ctx))
	rows := b.rows(t)
	require.Equal(t, first[0], rows[0].ID)
	require.Equal(t, second[0], rows[1].ID)
}

func TestWriteNotifiesOnCommitOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, outbox.Config{NotifyInterval: -1}) // every Write may notify: nothing is folded
	conn := pgtest.Listen(t, ident.Channel(b.schema, "outbox"))

	require.NoError(t, b.inTx(t, false, func(tx pgx.Tx) error {
		_, err := b.outbox.Write(ctx, tx, outbox.Message{Topic: "rolled-back"})
		return err
	}))
	require.NoError(t, b.inTx(t, true, func(tx pgx.Tx) error {
		_, err := b.outbox.Write(ctx, tx, outbox.Message{Topic: "a"}, outbox.Message{Topic: "b"})
		return err
	}))
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := conn.WaitForNotification(waitCtx)
	require.NoError(t, err)

	// Nothing else is pending: a rollback notifies nobody, and two messages
	// in one statement notify once.
	// (The default NotifyInterval would also fold Writes within 20ms.)
	quiet, cancelQuiet := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelQuiet()
	_, err = conn.WaitForNotification(quiet)
	require.Error(t, err)
}

// The Watermill publisher writes into the transaction it is bound to.
func TestPublisherWritesInTheTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, outbox.Config{})

	given := message.NewMessage(uuid.NewString(), []byte("given"))
	given.Metadata.Set(pgbox.MetadataEventType, "OrderPlaced")
	given.Metadata.Set(pgbox.MetadataOrderingKey, "order-9")
	given.Metadata.Set("tenant", "acme")
	blank := message.NewMessage("", []byte("blank"))

	require.NoError(t, b.inTx(t, true, func(tx pgx.Tx) error {
		return b.outbox.Publisher(ctx, tx).Publish("orders", given, blank)
	}))
	rows := b.rows(t)
	require.Len(t, rows, 2)
	require.Equal(t, given.UUID, rows[0].ID.String(), "a message's UUID is its outbox id")
	require.Equal(t, "OrderPlaced", rows[0].EventType)
	require.Equal(t, "order-9", *rows[0].OrderingKey)
	require.Equal(t, map[string]string{"tenant": "acme"}, rows[0].Metadata)
	require.Equal(t, rows[1].ID.String(), blank.UUID, "an empty UUID gets the new id written back")
	require.Equal(t, uuid.Version(7), rows[1].ID.Version())

	err := b.inTx(t, true, func(tx pgx.Tx) error {
		return b.outbox.Publisher(ctx, tx).Publish("orders", message.NewMessage("01ARZ3NDEKTSV4RRFFQ69G5FAV", nil))
	})
	require.ErrorIs(t, err, outbox.ErrInvalidMessage)
	require.ErrorContains(t, err, `UUID "01ARZ3NDEKTSV4RRFFQ69G5FAV" is not a UUID`)
	require.Len(t, b.rows(t), 2)
}

func TestUnmigratedSchemaGetsAClearError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	o, err := outbox.New(pool, outbox.Config{Schema: pgtest.EmptySchema(t)})
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = o.Write(ctx, tx, outbox.Message{Topic: "t"})
	require.ErrorIs(t, err, pgbox.ErrSchemaNotMigrated)
	require.ErrorContains(t, err, "run inboxctl migrate up")
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	_, err := outbox.New(nil, outbox.Config{})
	require.ErrorContains(t, err, "pool is nil")
	_, err = outbox.New(pgtest.Pool(t), outbox.Config{MaxPayloadBytes: -2})
	require.ErrorContains(t, err, "Config.MaxPayloadBytes is -2")
	_, err = outbox.New(pgtest.Pool(t), outbox.Config{Schema: "a\x00"})
	require.ErrorContains(t, err, "Config.Schema")
}

func TestMetadataIsAJSONObject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, outbox.Config{})
	require.NoError(t, b.inTx(t, true, func(tx pgx.Tx) error {
		_, err := b.outbox.Write(ctx, tx, outbox.Message{Topic: "t", Metadata: map[string]string{"a": `"quoted" <b>`}})
		return err
	}))
	var raw []byte
	require.NoError(t, b.pool.QueryRow(ctx, ident.Render("SELECT metadata FROM /* schema */outbox", b.schema)).Scan(&raw))
	var got map[string]string
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, `"quoted" <b>`, got["a"])
}
