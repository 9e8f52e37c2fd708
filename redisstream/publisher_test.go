package redisstream_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/brokertest"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/redisstream"
	"github.com/pgbox/pgbox/relay"
)

// client connects to the Redis server at url, closed with the test.
func client(t testing.TB, url string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newPublisher is a Publisher on rdb, with cfg's other settings.
func newPublisher(t testing.TB, rdb redis.UniversalClient, cfg redisstream.PublisherConfig) *redisstream.Publisher {
	t.Helper()
	cfg.Client = rdb
	pub, err := redisstream.NewPublisher(cfg)
	require.NoError(t, err)
	return pub
}

// stream is a stream name of the test's own.
func stream() string { return "redisstream_" + uuid.NewString() }

// subscribe reads topic through watermill-redisstream's Subscriber, in a
// consumer group, from the stream's first entry, on a client of its own
// (closing the subscriber closes it), until the test ends.
func subscribe(t testing.TB, url, topic string) <-chan *message.Message {
	t.Helper()
	sub, err := wmredis.NewSubscriber(wmredis.SubscriberConfig{
		Client:        client(t, url),
		ConsumerGroup: "test",
		// Without it, the first read blocks in Redis until an entry comes,
		// and a subscriber closed before then leaves it behind.
		DisableIndefiniteInitialBlock: true,
	}, watermill.NopLogger{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		_ = sub.Close()
	})
	got, err := sub.Subscribe(ctx, topic)
	require.NoError(t, err)
	return got
}

// What the publisher writes, by PublishResults and by Publish,
// watermill-redisstream's Subscriber reads unchanged: the UUID, the
// payload byte for byte and the metadata, in order.
func TestWatermillSubscriberReadsWhatItPublishes(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, brokertest.Redis)
	topic := stream()
	pub := newPublisher(t, client(t, srv.URL()), redisstream.PublisherConfig{})

	var sent []*message.Message
	for i, p := range [][]byte{[]byte(`{"order":1}`), {0, 0xff, 0xfe, '\n'}, nil, []byte("four")} {
		m := message.NewMessage(uuid.NewString(), p)
		if i != 2 { // one without metadata
			m.Metadata.Set(pgbox.MetadataEventType, "OrderPlaced")
			m.Metadata.Set(pgbox.MetadataOrderingKey, "customer-7")
			m.Metadata.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		}
		sent = append(sent, m)
	}
	require.Equal(t, []error{nil, nil}, pub.PublishResults(topic, sent[:2]...))
	require.NoError(t, pub.Publish(topic, sent[2:]...))

	got := subscribe(t, srv.URL(), topic)
	for _, want := range sent {
		select {
		case m := <-got:
			require.Equal(t, want.UUID, m.UUID)
			require.Equal(t, string(want.Payload), string(m.Payload))
			require.Equal(t, want.Metadata, m.Metadata)
			m.Ack()
		case <-time.After(10 * time.Second):
			t.Fatalf("message %s not received", want.UUID)
		}
	}
}

// refusing marshals as watermill-redisstream does, but gives the messages
// whose payload is "refuse" no fields, an XADD that Redis refuses.
type refusing struct {
	wmredis.DefaultMarshallerUnmarshaller
}

func (r refusing) Marshal(topic string, msg *message.Message) (map[string]any, error) {
	if string(msg.Payload) == "refuse" {
		return map[string]any{}, nil
	}
	return r.DefaultMarshallerUnmarshaller.Marshal(topic, msg)
}

// Each message of a call has its own result: a message Redis refuses in
// the middle of the pipeline, or that the Marshaller rejects, fails alone,
// not as an outage, and the others of the call are published, in order;
// Publish says how many failed. A stream whose key holds a string refuses
// every message, as the stream's fault, not an outage.
func TestEachMessageHasItsOwnResult(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := brokertest.Start(t, brokertest.Redis)
	rdb := client(t, srv.URL())
	topic := stream()
	pub := newPublisher(t, rdb, redisstream.PublisherConfig{Marshaller: refusing{}})

	msg := func(payload string) *message.Message { return message.NewMessage(uuid.NewString(), []byte(payload)) }
	reserved := msg("reserved")
	reserved.Metadata.Set(wmredis.UUIDHeaderKey, "mine")
	msgs := []*message.Message{msg("a"), msg("refuse"), msg("b"), reserved, msg("c")}
	errs := pub.PublishResults(topic, msgs...)
	require.Len(t, errs, len(msgs))
	require.NoError(t, errs[0])
	require.ErrorContains(t, errs[1], "wrong number of arguments")
	require.ErrorContains(t, errs[1], msgs[1].UUID)
	require.False(t, relay.IsUnreachable(errs[1]), "a refused message is not an outage: %v", errs[1])
	require.NoError(t, errs[2])
	require.ErrorContains(t, errs[3], "reserved")
	require.False(t, relay.IsUnreachable(errs[3]), "a message the Marshaller rejects is not an outage: %v", errs[3])
	require.NoError(t, errs[4])
	entries, err := rdb.XRange(ctx, topic, "-", "+").Result()
	require.NoError(t, err)
	var published []string
	for _, e := range entries {
		published = append(published, e.Values[wmredis.UUIDHeaderKey].(string))
	}
	require.Equal(t, []string{msgs[0].UUID, msgs[2].UUID, msgs[4].UUID}, published)
	require.ErrorContains(t, pub.Publish(topic, msg("d"), msg("refuse")), "1 of 2 messages")

	notStream := stream()
	require.NoError(t, rdb.Set(ctx, notStream, "a string", 0).Err())
	for _, err := range pub.PublishResults(notStream, msg("e"), msg("f")) {
		require.ErrorContains(t, err, "WRONGTYPE")
		require.ErrorContains(t, err, "holds something other than a stream")
		require.False(t, relay.IsUnreachable(err), "a key of the wrong type is not an outage: %v", err)
	}
}

// While Redis is down every message's error says it is unreachable; once
// it is back the client reconnects and the publisher publishes again, and
// what Redis acknowledged before it was killed is still there.
func TestOutageIsUnreachableAndOutlived(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := brokertest.Start(t, brokertest.Redis)
	rdb := client(t, srv.URL())
	topic := stream()
	pub := newPublisher(t, rdb, redisstream.PublisherConfig{})
	msgs := func() []*message.Message {
		return []*message.Message{message.NewMessage(uuid.NewString(), []byte("a")), message.NewMessage(uuid.NewString(), []byte("b"))}
	}
	require.Equal(t, []error{nil, nil}, pub.PublishResults(topic, msgs()...))

	srv.Kill(t)
	for _, err := range pub.PublishResults(topic, msgs()...) {
		require.Error(t, err)
		require.ErrorIs(t, err, relay.ErrBrokerUnreachable)
		require.True(t, relay.IsUnreachable(err))
	}
	require.ErrorIs(t, pub.Publish(topic, msgs()...), relay.ErrBrokerUnreachable)

	srv.Restart(t)
	require.Eventually(t, func() bool {
		errs := pub.PublishResults(topic, msgs()...)
		return errs[0] == nil && errs[1] == nil
	}, time.Minute, 10*time.Millisecond)
	n, err := rdb.XLen(ctx, topic).Result()
	require.NoError(t, err)
	require.EqualValues(t, 4, n, "the two entries of before the outage and the two of after it")
}

// A relay publishing through the publisher publishes every row once, the
// rows of each ordering key in the order they were written.
func TestRelayPublishesEachRowOnceInKeyOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := brokertest.Start(t, brokertest.Redis)
	rdb := client(t, srv.URL())
	topic := stream()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	box, err := outbox.New(pool, outbox.Config{Schema: schema})
	require.NoError(t, err)

	// Keyed and unkeyed rows, interleaved, over several transactions.
	keyOf := map[string]string{} // message id → ordering key
	written := map[string][]string{}
	var all int
	for tx := range 4 {
		msgs := make([]outbox.Message, 30)
		for i := range msgs {
			msgs[i] = outbox.Message{Topic: topic, EventType: "E", Payload: []byte("p")}
			if i%3 != 0 {
				msgs[i].OrderingKey = []string{"k1", "k2", "k3", "k4"}[(tx+i)%4]
			}
		}
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			ids, err := box.Write(ctx, tx, msgs...)
			for i, id := range ids {
				keyOf[id.String()] = msgs[i].OrderingKey
				written[msgs[i].OrderingKey] = append(written[msgs[i].OrderingKey], id.String())
			}
			return err
		}))
		all += len(msgs)
	}

	r, err := relay.New(pool, relay.Config{Publisher: newPublisher(t, rdb, redisstream.PublisherConfig{}), Schema: schema,
		PollOnly: true, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logtest.Output(t), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(func() { require.NoError(t, r.Stop(ctx)) })
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, pool.QueryRow(ctx, ident.Render("SELECT count(*) FROM /* schema */outbox WHERE status <> 'published'", schema)).Scan(&waiting))
		return waiting == 0
	}, time.Minute, 10*time.Millisecond)

	entries, err := rdb.XRange(ctx, topic, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, entries, all, "each row published once")
	seen := map[string]bool{}
	got := map[string][]string{}
	for _, e := range entries {
		m, err := wmredis.DefaultMarshallerUnmarshaller{}.Unmarshal(e.Values)
		require.NoError(t, err)
		require.False(t, seen[m.UUID], "message %s published twice", m.UUID)
		seen[m.UUID] = true
		key, ok := keyOf[m.UUID]
		require.True(t, ok, "message %s is no row's", m.UUID)
		require.Equal(t, key, m.Metadata.Get(pgbox.MetadataOrderingKey))
		got[key] = append(got[key], m.UUID)
	}
	for _, key := range []string{"k1", "k2", "k3", "k4"} {
		require.Equal(t, written[key], got[key], "the rows of key %s in the order they were written", key)
	}
	require.ElementsMatch(t, written[""], got[""])
}

// Streams are trimmed as watermill-redisstream's publisher trims them:
// each stream named in Maxlens to its length, the others to
// DefaultMaxlen, approximately (Redis removes whole nodes of 100 entries).
func TestMaxlensTrimStreams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := brokertest.Start(t, brokertest.Redis)
	rdb := client(t, srv.URL())
	named, other, unlimited := stream(), stream(), stream()
	pub := newPublisher(t, rdb, redisstream.PublisherConfig{DefaultMaxlen: 50, Maxlens: map[string]int64{named: 10, unlimited: 0}})
	const n = 500
	for _, topic := range []string{named, other, unlimited} {
		msgs := make([]*message.Message, n)
		for i := range msgs {
			msgs[i] = message.NewMessage(uuid.NewString(), []byte("x"))
		}
		require.NoError(t, pub.Publish(topic, msgs...))
	}
	for topic, limit := range map[string]int64{named: 10, other: 50} {
		l, err := rdb.XLen(ctx, topic).Result()
		require.NoError(t, err)
		require.GreaterOrEqual(t, l, limit)
		require.Less(t, l, limit+100, "trimmed to about %d", limit)
	}
	l, err := rdb.XLen(ctx, unlimited).Result()
	require.NoError(t, err)
	require.EqualValues(t, n, l, "Maxlens 0: not trimmed")
}

// A config NewPublisher cannot use is refused with an error naming the
// field.
func TestNewPublisherRefusesBadConfig(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never used
	t.Cleanup(func() { _ = rdb.Close() })
	for cfg, want := range map[*redisstream.PublisherConfig]string{
		{}:                               "PublisherConfig.Client is nil",
		{Client: rdb, DefaultMaxlen: -1}: "PublisherConfig.DefaultMaxlen is -1",
		{Client: rdb, Maxlens: map[string]int64{"orders": -5}}: `PublisherConfig.Maxlens["orders"] is -5`,
	} {
		_, err := redisstream.NewPublisher(*cfg)
		require.ErrorContains(t, err, want)
	}
}

// A Redis that cannot take writes for now, whatever the message (a
// replica, as a primary is after a failover until the client finds the
// new one; a server out of memory), is unreachable for the relay, not the
// messages' fault; once it takes writes again the publisher publishes.
func TestRedisRefusingAllWritesIsUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := brokertest.Start(t, brokertest.Redis)
	rdb := client(t, srv.URL())
	topic := stream()
	pub := newPublisher(t, rdb, redisstream.PublisherConfig{})
	msg := func() *message.Message { return message.NewMessage(uuid.NewString(), []byte("a")) }
	for _, c := range []struct {
		name, want    string
		refuse, allow []any
	}{
		{"a replica", "READONLY", []any{"replicaof", "127.0.0.1", "1"}, []any{"replicaof", "no", "one"}},
		{"out of memory", "OOM", []any{"config", "set", "maxmemory", "1"}, []any{"config", "set", "maxmemory", "0"}},
	} {
		require.NoError(t, rdb.Do(ctx, c.refuse...).Err(), c.name)
		err := pub.PublishResults(topic, msg())[0]
		require.ErrorContains(t, err, c.want, c.name)
		require.ErrorIs(t, err, relay.ErrBrokerUnreachable, c.name)
		require.NoError(t, rdb.Do(ctx, c.allow...).Err(), c.name)
		require.Equal(t, []error{nil}, pub.PublishResults(topic, msg()), c.name)
	}
}
