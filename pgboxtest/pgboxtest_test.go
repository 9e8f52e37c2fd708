package pgboxtest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/pgboxtest"
	"github.com/pgbox/pgbox/relay"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func schemaExists(t *testing.T, pool *pgxpool.Pool, schema string) bool {
	t.Helper()
	var exists bool
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)", schema).Scan(&exists))
	return exists
}

func TestSchemaIsMigratedAndDroppedWhenTheTestEnds(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	var schema, empty string
	// Not parallel: the subtest must have ended, cleanups and all, when
	// t.Run returns, to see its schemas gone.
	t.Run("Inner", func(t *testing.T) {
		schema = pgboxtest.Schema(t, pool)
		require.Regexp(t, "^t_[a-z0-9_]*whenthetestends_inner_[0-9a-f]{8}$", schema, "named after the test")
		require.NoError(t, pgbox.CheckSchema(t.Context(), pool, schema))
		_, err := pool.Exec(t.Context(), ident.Render("CREATE TABLE /* schema */mine (id int)", schema))
		require.NoError(t, err, "the test's own tables go in it too")

		empty = pgboxtest.EmptySchema(t, pool)
		require.NotEqual(t, schema, empty)
		require.False(t, schemaExists(t, pool, empty), "an empty schema is only a name")
		_, err = pool.Exec(t.Context(), "CREATE SCHEMA "+ident.Quote(empty))
		require.NoError(t, err)
	})
	require.False(t, schemaExists(t, pool, schema))
	require.False(t, schemaExists(t, pool, empty))
}

// drainBundle is a schema with an inbox for consumer "payments", an outbox,
// and a table of effects.
type drainBundle struct {
	inbox  *inbox.Inbox
	outbox *outbox.Outbox
	pool   *pgxpool.Pool
	schema string
}

func setupDrain(t *testing.T) *drainBundle {
	t.Helper()
	b := &drainBundle{pool: pgtest.Pool(t), schema: pgtest.Schema(t)}
	var err error
	b.inbox, err = inbox.New(b.pool, inbox.Config{Consumer: "payments", Schema: b.schema})
	require.NoError(t, err)
	b.outbox, err = outbox.New(b.pool, outbox.Config{Schema: b.schema})
	require.NoError(t, err)
	_, err = b.pool.Exec(context.Background(), ident.Render("CREATE TABLE /* schema */effects (id text)", b.schema))
	require.NoError(t, err)
	return b
}

func (b *drainBundle) sql(q string) string { return ident.Render(q, b.schema) }

func (b *drainBundle) count(t *testing.T, q string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), b.sql(q)).Scan(&n))
	return n
}

func (b *drainBundle) receive(t *testing.T, msgs ...inbox.Message) {
	t.Helper()
	for _, m := range msgs {
		_, err := b.inbox.Receive(context.Background(), m)
		require.NoError(t, err)
	}
}

// startDispatcher runs handler for every "OrderPlaced" message until the
// test ends.
func (b *drainBundle) startDispatcher(t *testing.T, handler dispatcher.Handler, backoff time.Duration) {
	t.Helper()
	d, err := dispatcher.New(b.pool, dispatcher.Config{
		Inbox:            b.inbox,
		Handlers:         map[string]dispatcher.Handler{"OrderPlaced": handler},
		Logger:           slog.New(slog.DiscardHandler),
		PollInterval:     20 * time.Millisecond,
		RetryBackoffFunc: func(int) time.Duration { return backoff },
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
}

// recordEffect is an InTx handler that records the message's id as its
// effect, failing each message's first attempt so that it goes through a
// backoff first.
func (b *drainBundle) recordEffect(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
	if m.Attempt == 1 {
		return errors.New("first attempts fail")
	}
	_, err := tx.Exec(ctx, b.sql("INSERT INTO /* schema */effects VALUES ($1)"), m.ID)
	return err
}

// counter is a Watermill publisher that counts what it is given.
type counter struct{ n atomic.Int64 }

func (c *counter) Publish(_ string, msgs ...*message.Message) error {
	c.n.Add(int64(len(msgs)))
	return nil
}

func (c *counter) Close() error { return nil }

func TestWaitDrainedWaitsForTheDispatcherAndTheRelay(t *testing.T) {
	t.Parallel()
	b := setupDrain(t)
	for i := range 20 {
		b.receive(t, inbox.Message{ID: fmt.Sprint("m-", i), EventType: "OrderPlaced"})
	}
	tx, err := b.pool.Begin(context.Background())
	require.NoError(t, err)
	for i := range 5 {
		_, err := b.outbox.Write(context.Background(), tx, outbox.Message{Topic: "orders", EventType: "OrderPlaced", Payload: []byte{byte(i)}})
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(context.Background()))

	b.startDispatcher(t, dispatcher.InTx(b.recordEffect), 50*time.Millisecond)
	pub := &counter{}
	r, err := relay.New(b.pool, relay.Config{Publisher: pub, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler), Schema: b.schema})
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, pgboxtest.WaitDrained(ctx, b.pool, b.schema))

	// Every message went through a failed attempt and a backoff, and it was
	// all over when WaitDrained returned.
	require.Equal(t, 20, b.count(t, "SELECT count(*) FROM /* schema */effects"))
	require.Equal(t, 20, b.count(t, "SELECT count(*) FROM /* schema */inbox WHERE status = 'done' AND attempts = 2"))
	require.Equal(t, 5, b.count(t, "SELECT count(*) FROM /* schema */outbox WHERE status = 'published'"))
	require.EqualValues(t, 5, pub.n.Load())
}

// A message waiting out its backoff is work still to do: WaitDrained does
// not return for it.
func TestWaitDrainedCountsBackoffAsPending(t *testing.T) {
	t.Parallel()
	b := setupDrain(t)
	b.receive(t, inbox.Message{ID: "m-1", EventType: "OrderPlaced"})
	b.startDispatcher(t, dispatcher.InTx(b.recordEffect), time.Hour)
	require.Eventually(t, func() bool {
		return b.count(t, "SELECT count(*) FROM /* schema */inbox WHERE status = 'pending' AND attempts = 1") == 1
	}, 30*time.Second, 10*time.Millisecond, "the first attempt never failed")

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	err := pgboxtest.WaitDrained(ctx, b.pool, b.schema)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "schema "+b.schema+" did not drain: inbox has 1 pending (1 in backoff) and 0 running, outbox 0 pending (0 in backoff) and 0 running")
}

func TestWaitDrainedSaysWhatIsLeftWhenNothingDrains(t *testing.T) {
	t.Parallel()
	b := setupDrain(t)
	b.receive(t, inbox.Message{ID: "m-1", EventType: "OrderPlaced"}, inbox.Message{ID: "m-2", EventType: "OrderPlaced"})

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	err := pgboxtest.WaitDrained(ctx, b.pool, b.schema)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "inbox has 2 pending (0 in backoff) and 0 running")
	require.ErrorContains(t, err, "is a dispatcher running for each consumer, and a relay?")

	require.ErrorContains(t, pgboxtest.WaitDrained(ctx, b.pool, ""), "schema name is empty")

	done, cancelNow := context.WithCancel(t.Context())
	cancelNow()
	err = pgboxtest.WaitDrained(done, b.pool, b.schema)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "did not drain: no count finished in time")
}

// Messages held behind a dead head of their ordering key wait for an
// operator, not for time: WaitDrained does not wait for them.
func TestWaitDrainedSkipsMessagesBehindADeadHead(t *testing.T) {
	t.Parallel()
	b := setupDrain(t)
	b.receive(t,
		inbox.Message{ID: "poison", EventType: "OrderPlaced", OrderingKey: "order-17"},
		inbox.Message{ID: "held", EventType: "OrderPlaced", OrderingKey: "order-17"},
		inbox.Message{ID: "free", EventType: "OrderPlaced"},
	)
	b.startDispatcher(t, dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
		if m.ID == "poison" {
			return dispatcher.Permanent(errors.New("not an order"))
		}
		_, err := tx.Exec(ctx, b.sql("INSERT INTO /* schema */effects VALUES ($1)"), m.ID)
		return err
	}), time.Millisecond)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, pgboxtest.WaitDrained(ctx, b.pool, b.schema))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM /* schema */inbox WHERE message_id = 'free' AND status = 'done'"))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM /* schema */inbox WHERE message_id = 'poison' AND status = 'dead'"))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM /* schema */inbox WHERE message_id = 'held' AND status = 'pending'"))
}

// processing is a synchronous consumer: inbox.Process records the message
// and writes its effect in one transaction.
func (b *drainBundle) processing(ctx context.Context, d pgboxtest.Delivery) error {
	_, err := b.inbox.Process(ctx, inbox.Message{ID: fmt.Sprint("order-", d.Round), EventType: "OrderPlaced"},
		func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, b.sql("INSERT INTO /* schema */effects VALUES ($1)"), fmt.Sprint("order-", d.Round))
			return err
		})
	return err
}

func (b *drainBundle) effect(ctx context.Context, round int) (int, error) {
	var n int
	err := b.pool.QueryRow(ctx, b.sql("SELECT count(*) FROM /* schema */effects WHERE id = $1"), fmt.Sprint("order-", round)).Scan(&n)
	return n, err
}

func TestIdempotencyCheckPassesAnIdempotentConsumer(t *testing.T) {
	t.Parallel()
	b := setupDrain(t)

	var (
		mu     sync.Mutex
		events []string
	)
	log := func(e string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}
	check := pgboxtest.IdempotencyCheck{
		Deliveries: 4,
		Deliver: func(ctx context.Context, d pgboxtest.Delivery) error {
			if d.Concurrent {
				log(fmt.Sprint("deliver ", d.Round))
			} else {
				log(fmt.Sprint("deliver ", d.Round, ".", d.Attempt))
			}
			return b.processing(ctx, d)
		},
		Crash:   func(context.Context) error { log("crash"); return nil },
		Restart: func(context.Context) error { log("restart"); return nil },
		Settle:  func(context.Context) error { log("settle"); return nil },
		Effect: func(ctx context.Context, round int) (int, error) {
			log(fmt.Sprint("effect ", round))
			return b.effect(ctx, round)
		},
	}
	pgboxtest.RequireIdempotent(t, check)

	require.Equal(t, []string{
		"deliver 1.1", "crash", "restart",
		"deliver 1.2", "crash", "restart",
		"deliver 1.3", "crash", "restart",
		"deliver 1.4",
		"settle", "effect 1",
		"deliver 2", "deliver 2", "deliver 2", "deliver 2",
		"crash", "restart",
		"settle", "effect 2",
	}, events)
}

func TestIdempotencyCheckCatchesDuplicateEffects(t *testing.T) {
	t.Parallel()

	t.Run("Sequential", func(t *testing.T) {
		t.Parallel()
		b := setupDrain(t)
		// No dedupe at all: every delivery charges again.
		err := pgboxtest.IdempotencyCheck{
			Deliver: func(ctx context.Context, d pgboxtest.Delivery) error {
				_, err := b.pool.Exec(ctx, b.sql("INSERT INTO /* schema */effects VALUES ($1)"), fmt.Sprint("order-", d.Round))
				return err
			},
			Effect: b.effect,
		}.Run(t.Context())
		require.ErrorIs(t, err, pgboxtest.ErrNotIdempotent)
		require.EqualError(t, err, "pgboxtest: not idempotent: round 1 (8 sequential deliveries) had its effect 8 times, want exactly 1")
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		b := setupDrain(t)
		// Check, then act, with no lock: right one at a time, wrong when
		// deliveries race. Concurrent deliveries all check before any acts,
		// so the race is lost every time rather than now and then.
		const deliveries = 8
		var checked atomic.Int64
		allChecked := make(chan struct{})
		err := pgboxtest.IdempotencyCheck{
			Deliveries: deliveries,
			Deliver: func(ctx context.Context, d pgboxtest.Delivery) error {
				n, err := b.effect(ctx, d.Round)
				if err != nil {
					return err
				}
				if d.Concurrent {
					if checked.Add(1) == deliveries {
						close(allChecked)
					}
					select { // bounded, so that a check that stopped racing fails rather than hangs
					case <-allChecked:
					case <-time.After(10 * time.Second):
					}
				}
				if n > 0 {
					return nil // seen it
				}
				_, err = b.pool.Exec(ctx, b.sql("INSERT INTO /* schema */effects VALUES ($1)"), fmt.Sprint("order-", d.Round))
				return err
			},
			Effect: b.effect,
		}.Run(t.Context())
		require.ErrorIs(t, err, pgboxtest.ErrNotIdempotent)
		require.EqualError(t, err, "pgboxtest: not idempotent: round 2 (8 concurrent deliveries) had its effect 8 times, want exactly 1")
	})

	t.Run("Never", func(t *testing.T) {
		t.Parallel()
		err := pgboxtest.IdempotencyCheck{
			Deliver: func(context.Context, pgboxtest.Delivery) error { return nil },
			Effect:  func(context.Context, int) (int, error) { return 0, nil },
		}.Run(t.Context())
		require.ErrorIs(t, err, pgboxtest.ErrNotIdempotent)
		require.ErrorContains(t, err, "round 1 (8 sequential deliveries) had no effect, want exactly 1: was the message ever handled?")
	})
}

func TestIdempotencyCheckReportsFailingHooks(t *testing.T) {
	t.Parallel()
	ok := func(context.Context) error { return nil }
	once := func(context.Context, int) (int, error) { return 1, nil }
	deliver := func(context.Context, pgboxtest.Delivery) error { return nil }
	boom := errors.New("boom")

	for want, check := range map[string]pgboxtest.IdempotencyCheck{
		"pgboxtest: round 1 (sequential), delivery 3: boom": {Effect: once, Deliver: func(_ context.Context, d pgboxtest.Delivery) error {
			if d.Attempt == 3 {
				return boom
			}
			return nil
		}},
		"pgboxtest: round 2 (concurrent), delivery 5: boom": {Effect: once, Deliver: func(_ context.Context, d pgboxtest.Delivery) error {
			if d.Concurrent && d.Attempt == 5 {
				return boom
			}
			return nil
		}},
		"pgboxtest: crash after round 1's delivery 1: boom":                      {Effect: once, Deliver: deliver, Crash: func(context.Context) error { return boom }, Restart: ok},
		"pgboxtest: restart after round 1's delivery 1: boom":                    {Effect: once, Deliver: deliver, Crash: ok, Restart: func(context.Context) error { return boom }},
		"pgboxtest: settle round 1 (8 sequential deliveries): boom":              {Effect: once, Deliver: deliver, Settle: func(context.Context) error { return boom }},
		"pgboxtest: count the effect of round 1 (8 sequential deliveries): boom": {Deliver: deliver, Effect: func(context.Context, int) (int, error) { return 0, boom }},
	} {
		err := check.Run(t.Context())
		require.ErrorIs(t, err, boom, want)
		require.EqualError(t, err, want)
	}
}

func TestIdempotencyCheckRejectsAnIncompleteCheck(t *testing.T) {
	t.Parallel()
	err := pgboxtest.IdempotencyCheck{Deliveries: 1, Crash: func(context.Context) error { return nil }}.Run(t.Context())
	require.EqualError(t, err, "pgboxtest: IdempotencyCheck.Deliver is nil: give the function that delivers the message once; "+
		"IdempotencyCheck.Effect is nil: give the function that counts the message's effect; "+
		"IdempotencyCheck.Deliveries is 1: deliver at least twice (0 for the default, 8); "+
		"IdempotencyCheck.Crash and Restart go together: set both or neither")
}

// fatalRecorder is a testing.TB whose Fatal records the failure and ends
// the goroutine, as the real one does, without failing the test running it.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatal(args ...any) {
	f.fatal = fmt.Sprint(args...)
	runtime.Goexit()
}

func TestRequireIdempotentFailsTheTest(t *testing.T) {
	t.Parallel()
	rec := &fatalRecorder{TB: t}
	charges := 0
	returned := false
	done := make(chan struct{})
	go func() {
		defer close(done)
		pgboxtest.RequireIdempotent(rec, pgboxtest.IdempotencyCheck{
			Deliveries: 3,
			Deliver:    func(context.Context, pgboxtest.Delivery) error { charges++; return nil },
			Effect:     func(context.Context, int) (int, error) { return charges, nil },
		})
		returned = true
	}()
	<-done
	require.False(t, returned, "RequireIdempotent stops the test at once")
	require.Equal(t, "pgboxtest: not idempotent: round 1 (3 sequential deliveries) had its effect 3 times, want exactly 1", rec.fatal)
}
