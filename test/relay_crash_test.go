package test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/relay"
)

// childLease is the relay lease in child processes: short, so that a
// killed relay's rows come back quickly.
const childLease = time.Second

// TestChildProcess is not a test: it is the body of the relay processes
// the tests below start and kill (pgtest.StartChild).
//
//   - "relay": a relay that says "publishing" on its first publish;
//   - "relay-pause": a relay that, after its first successful publish,
//     says "published" and freezes (SIGSTOP to itself) before recording
//     it, to be killed. It freezes rather than sleeps in Publish: the relay
//     would give up a publish that does not return and record its rows.
func TestChildProcess(t *testing.T) {
	role := pgtest.ChildRole()
	if role == "" {
		t.Skip("the body of child processes started by other tests")
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)

	b := sqlBroker(t, pool, os.Getenv("PGBOX_BROKER_SCHEMA"))
	var once sync.Once
	pub := publishFunc(func(topic string, msgs ...*message.Message) error {
		if role == "relay" {
			once.Do(func() { fmt.Println("publishing") })
		}
		if err := b.publisher.Publish(topic, msgs...); err != nil {
			return err
		}
		if role == "relay-pause" {
			fmt.Println("published", len(msgs))
			// Killed here, frozen: published, not yet recorded.
			require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGSTOP))
		}
		return nil
	})
	workers := 2
	if role == "relay-pause" {
		workers = 1 // exactly one batch is published and left unrecorded
	}
	r, err := relay.New(pool, relay.Config{
		// watermill-sql takes a batch in one INSERT: one call publishes
		// the 10 rows the test expects to be published and unrecorded.
		AtomicPublisher: true,
		BatchSize:       10,
		Lease:           childLease,
		Logger:          slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		PollInterval:    20 * time.Millisecond,
		Publisher:       pub,
		Schema:          os.Getenv("PGBOX_TEST_SCHEMA"),
		Workers:         workers,
	})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	fmt.Println("ready")
	select {} // until killed
}

// publishFunc adapts a function to a Watermill publisher.
type publishFunc func(topic string, msgs ...*message.Message) error

func (f publishFunc) Publish(topic string, msgs ...*message.Message) error { return f(topic, msgs...) }
func (f publishFunc) Close() error                                         { return nil }

func startRelayChild(t *testing.T, role string, p *producer, brokerSchema string) *pgtest.Child {
	t.Helper()
	child := pgtest.StartChild(t, "TestChildProcess", role, "PGBOX_TEST_SCHEMA="+p.schema, "PGBOX_BROKER_SCHEMA="+brokerSchema)
	readLine(t, child, "ready")
	return child
}

func readLine(t *testing.T, child *pgtest.Child, want string) {
	t.Helper()
	line, ok := child.Line(60 * time.Second)
	require.True(t, ok, "child ended or fell silent before saying %q; stderr:\n%s", want, child.Stderr())
	require.Contains(t, line, want)
}

// A relay is SIGKILLed after its publish reached the broker and before it
// recorded it. Another relay publishes those rows again once the lease
// expires; the consumer's inbox dedupes them, so each order is paid once.
func TestRelayKilledBetweenPublishAndMarkCausesNoDoubleEffect(t *testing.T) {
	t.Parallel()
	p := newProducer(t, "orders")
	b := sqlBroker(t, p.pool, p.schema)
	c := startConsumer(t, b)
	for i := range 30 {
		p.place(t, order{ID: orderID(i), Cents: i}, "", true)
	}

	child := startRelayChild(t, "relay-pause", p, p.schema)
	readLine(t, child, "published 10")
	child.Kill()

	var running int
	var rows string // what the outbox holds, to tell a failure's cause
	require.NoError(t, p.pool.QueryRow(context.Background(), ident.Render(`
		SELECT count(*) FILTER (WHERE status = 'running'),
		       string_agg(format('%s attempts=%s token=%s available_at=%s error=%s', status, attempts, claim_token, available_at, last_error), E'\n' ORDER BY seq)
		FROM /* schema */outbox`, p.schema)).Scan(&running, &rows))
	require.Equal(t, 10, running, "the killed relay published 10 rows without recording them; the outbox:\n%s", rows)

	p.startRelay(t, b.publisher)
	waitPublished(t, p)
	c.waitSettled(t, 2*(30+10), 30)

	var deliveries, distinct int
	require.NoError(t, p.pool.QueryRow(context.Background(), ident.Render(
		`SELECT count(*), count(DISTINCT uuid) FROM /* schema */"watermill_orders"`, p.schema)).Scan(&deliveries, &distinct))
	require.Equal(t, 40, deliveries, "the 10 rows were published twice")
	require.Equal(t, 30, distinct)
	payments := c.paymentsPerOrder(t)
	require.Len(t, payments, 30)
	for i := range 30 {
		require.Equal(t, 1, payments[orderID(i)], orderID(i))
	}
}

// Three relay processes publish rows of many ordering keys, written by
// several producers at once: the consumer sees each key in the order its
// transactions committed.
func TestThreeRelayProcessesKeepPerKeyCommitOrder(t *testing.T) {
	t.Parallel()
	p := newProducer(t, "orders")
	b := sqlBroker(t, p.pool, p.schema)
	c := startConsumer(t, b)
	children := make([]*pgtest.Child, 3)
	for i := range children {
		children[i] = startRelayChild(t, "relay", p, p.schema)
	}

	const keys, writers, perWriter = 12, 4, 60
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				n := w*perWriter + i
				p.place(t, order{ID: orderID(n), Cents: n}, fmt.Sprintf("customer-%02d", n%keys), true)
			}
		})
	}
	wg.Wait()
	waitPublished(t, p)
	c.waitSettled(t, 2*writers*perWriter, writers*perWriter)
	for _, child := range children {
		readLine(t, child, "publishing") // every relay process took part
	}

	// Commit order per key is the outbox's seq order (writers of a key take
	// turns until commit); the consumer's order is its payments' order.
	produced := idsByKey(t, p.pool, ident.Render("SELECT ordering_key, id::text FROM /* schema */outbox ORDER BY seq", p.schema))
	consumed := idsByKey(t, c.pool, c.sql("SELECT ordering_key, message_id FROM /* schema */payments ORDER BY seq"))
	require.Len(t, produced, keys)
	require.Equal(t, produced, consumed)
}

func idsByKey(t *testing.T, pool *pgxpool.Pool, query string) map[string][]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), query)
	require.NoError(t, err)
	out := map[string][]string{}
	for rows.Next() {
		var key, id string
		require.NoError(t, rows.Scan(&key, &id))
		out[key] = append(out[key], id)
	}
	require.NoError(t, rows.Err())
	return out
}
