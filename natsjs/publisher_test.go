package natsjs_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjetstream "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/natstest"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/natsjs"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// stream connects to NATS and makes a stream of the test's own, bound to
// a subject of the same name, taking messages of up to maxBytes (0: any);
// both go when the test ends.
func stream(t testing.TB, maxBytes int32) (nc *nats.Conn, topic string) {
	t.Helper()
	nc, err := nats.Connect(natstest.URL(t))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	topic = "natsjs_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: topic, Subjects: []string{topic}, MaxMsgSize: cmpOr(maxBytes, -1)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), topic) })
	return nc, topic
}

func cmpOr(v, def int32) int32 {
	if v == 0 {
		return def
	}
	return v
}

func newPublisher(t testing.TB, nc *nats.Conn) *natsjs.Publisher {
	t.Helper()
	pub, err := natsjs.NewPublisher(nc, natsjs.Config{})
	require.NoError(t, err)
	return pub
}

// What the publisher sends, watermill-nats's JetStream subscriber reads:
// the UUID, the payload and the metadata, in order.
func TestWatermillSubscriberReadsWhatItPublishes(t *testing.T) {
	t.Parallel()
	nc, topic := stream(t, 0)
	pub := newPublisher(t, nc)

	var sent []*message.Message
	for _, p := range []string{"one", "two", "three"} {
		m := message.NewMessage(uuid.NewString(), []byte(p))
		m.Metadata.Set("event_type", "E_"+p)
		sent = append(sent, m)
	}
	require.Equal(t, []error{nil, nil, nil}, pub.PublishResults(topic, sent...))

	// Ended by closing nc, not by its Close, which drains nc on a
	// goroutine of its own.
	sub, err := wmjetstream.NewSubscriber(wmjetstream.SubscriberConfig{Conn: nc, Logger: watermill.NopLogger{}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	for _, want := range sent {
		select {
		case m := <-got:
			require.Equal(t, want.UUID, m.UUID)
			require.Equal(t, want.Payload, m.Payload)
			require.Equal(t, want.Metadata, m.Metadata)
			m.Ack()
		case <-time.After(10 * time.Second):
			t.Fatalf("message %s not received", want.UUID)
		}
	}
}

// Each message of a call has its own result: a message JetStream refuses
// fails alone, the others of the call are published, and Publish says how
// many failed. A lost connection is an outage, not the messages' fault.
func TestEachMessageHasItsOwnResult(t *testing.T) {
	t.Parallel()
	nc, topic := stream(t, 512)
	pub := newPublisher(t, nc)

	small := func() *message.Message { return message.NewMessage(uuid.NewString(), []byte("small")) }
	big := message.NewMessage(uuid.NewString(), make([]byte, 4096))
	errs := pub.PublishResults(topic, small(), big, small())
	require.NoError(t, errs[0])
	require.ErrorContains(t, errs[1], "maximum")
	require.False(t, errors.Is(errs[1], relay.ErrBrokerUnreachable), "a refused message is not an outage")
	require.NoError(t, errs[2])
	require.ErrorContains(t, pub.Publish(topic, small(), big), "1 of 2 messages")

	nc.Close()
	for _, err := range pub.PublishResults(topic, small(), small()) {
		require.ErrorIs(t, err, relay.ErrBrokerUnreachable)
	}
}

// A relay publishing through the publisher sends a batch's rows in one
// call and records each row's outcome: the rows JetStream took are
// published once, the one it refuses is charged alone.
func TestRelayRecordsEachRowsOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nc, topic := stream(t, 512)
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	box, err := outbox.New(pool, outbox.Config{Schema: schema})
	require.NoError(t, err)
	msgs := make([]outbox.Message, 20)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: topic, Payload: []byte("small")}
	}
	msgs[7].Payload = make([]byte, 4096)
	var ids []uuid.UUID
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		ids, err = box.Write(ctx, tx, msgs...)
		return err
	}))

	r, err := relay.New(pool, relay.Config{Publisher: newPublisher(t, nc), Schema: schema, MaxAttempts: 1,
		PollOnly: true, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logtest.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(func() { require.NoError(t, r.Stop(ctx)) })

	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, pool.QueryRow(ctx, ident.Render("SELECT count(*) FROM /* schema */outbox WHERE status IN ('pending', 'running')", schema)).Scan(&waiting))
		return waiting == 0
	}, 30*time.Second, 10*time.Millisecond)
	rows, err := pool.Query(ctx, ident.Render("SELECT id, status, attempts FROM /* schema */outbox", schema))
	require.NoError(t, err)
	got := map[uuid.UUID]string{}
	var (
		id       uuid.UUID
		status   string
		attempts int
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &status, &attempts}, func() error {
		require.Equal(t, 1, attempts)
		got[id] = status
		return nil
	})
	require.NoError(t, err)
	for i, id := range ids {
		want := "published"
		if i == 7 {
			want = "dead"
		}
		require.Equal(t, want, got[id], "row %d", i)
	}

	js, err := jetstream.New(nc)
	require.NoError(t, err)
	info, err := js.Stream(ctx, topic)
	require.NoError(t, err)
	require.EqualValues(t, len(ids)-1, info.CachedInfo().State.Msgs, "each row that went out went out once")
}
