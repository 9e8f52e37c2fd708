package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
	"github.com/pgbox/pgbox/watermillinbox"
)

// The two services of the run: a producer ("shop") whose orders go out
// through its outbox, and a consumer ("billing") whose inbox takes them in.
const (
	producerSchema = "chaos_shop"
	consumerSchema = "chaos_billing"
	consumerName   = "billing"
	topic          = "orders"
)

// Event types. OrderPlaced runs in the transaction; EmailRequested is
// leased (an outside call). The Poison* ones never succeed.
const (
	typeOrderPlaced    = "OrderPlaced"
	typeEmailRequested = "EmailRequested"
	typePoisonFail     = "PoisonFail"
	typePoisonPanic    = "PoisonPanic"
	typePoisonUnknown  = "PoisonUnknown" // no handler is registered
)

// maxAttempts is the consumer inbox's attempt budget: small, so poison dies
// within the run.
const maxAttempts = 8

// relayMaxAttempts is the relays' attempt budget (see startRelay).
const relayMaxAttempts = 3

// relayLease is the relays' claim lease: a round's publishing ends within
// three quarters of it (relay/batch.go).
const relayLease = 2 * time.Second

// TestChildProcess is not a test: it is the body of the processes the
// chaos driver starts, restarts and kills. The role comes from
// pgtest.ChildRole; the database from DATABASE_URL.
func TestChildProcess(t *testing.T) {
	role := pgtest.ChildRole()
	if role == "" {
		t.Skip("the body of the chaos suite's child processes")
	}
	ctx := context.Background()
	pool := childPool(t, 16)
	logger := childLogger(t)
	switch role {
	case "producer":
		produce(t, ctx, pool)
		return // finishes: its orders are written
	case "relay":
		startRelay(t, ctx, pool, logger)
	case "consumer":
		startConsumer(t, ctx, pool, logger)
	case "flood":
		go flood(ctx, pool)
	case "dispatcher":
		startDispatcher(t, ctx, pool, logger)
	case "locker":
		go holdHotRow(ctx, pool)
	case "drain":
		drain(t, ctx, pool)
		return
	default:
		t.Fatalf("unknown role %q", role)
	}
	fmt.Println("ready")
	select {} // until killed
}

// childLogger is the child's logger: level Warn, so that what a process
// waits on and what it retries shows, into the file the driver named
// (CHAOS_LOG), which outlives a SIGKILL; stderr if it named none.
func childLogger(t *testing.T) *slog.Logger {
	out := os.Stderr
	if path := os.Getenv("CHAOS_LOG"); path != "" {
		var err error
		out, err = os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		require.NoError(t, err)
	}
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func childPool(t *testing.T, conns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	require.NoError(t, err)
	cfg.MaxConns = conns
	cfg.ConnConfig.RuntimeParams["application_name"] = "chaos " + pgtest.ChildRole()
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	return pool
}

func envInt(name string) int {
	n, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		panic(fmt.Sprintf("chaos: %s=%q is not a number", name, os.Getenv(name)))
	}
	return n
}

// order is the producer's business event.
type order struct {
	Cents int `json:"cents"`
	ID    int `json:"order"`
}

// produce writes orders first..last (PRODUCER_FIRST, PRODUCER_LAST): for
// each, the order row and its two messages in one transaction. One
// transaction in twenty lingers before committing, so its messages commit
// after later ones: out-of-order commits under load. Every few orders also
// carry a poison message. A failed transaction (the database restarted) is
// tried again; an order already there is already done.
func produce(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	box, err := outbox.New(pool, outbox.Config{Schema: producerSchema})
	require.NoError(t, err)
	poisonEvery := envInt("CHAOS_POISON_EVERY")
	for id := envInt("PRODUCER_FIRST"); id <= envInt("PRODUCER_LAST"); id++ {
		for attempt := 0; ; attempt++ {
			err := placeOrder(ctx, pool, box, id, poisonEvery)
			if err == nil {
				break
			}
			if attempt > 600 {
				t.Fatalf("order %d: %v", id, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	fmt.Println("produced")
}

func placeOrder(ctx context.Context, pool *pgxpool.Pool, box *outbox.Outbox, id, poisonEvery int) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	tag, err := tx.Exec(ctx, ident.Render("INSERT INTO /* schema */orders (id, cents) VALUES ($1, $2) ON CONFLICT DO NOTHING", producerSchema), id, 100+id%900)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return nil // committed by an earlier try whose COMMIT reply was lost
	}
	body, _ := json.Marshal(order{Cents: 100 + id%900, ID: id})
	msgs := []outbox.Message{
		{Topic: topic, EventType: typeOrderPlaced, OrderingKey: fmt.Sprintf("customer-%d", id%97), Payload: body},
		{Topic: topic, EventType: typeEmailRequested, Payload: body},
	}
	if poisonEvery > 0 && id%poisonEvery == 0 {
		kinds := []outbox.Message{
			{Topic: topic, EventType: typePoisonFail, Payload: body},
			{Topic: topic, EventType: typePoisonPanic, Payload: body},
			{Topic: topic, EventType: typePoisonUnknown, Payload: body},
			{Topic: topic, EventType: typeOrderPlaced, Payload: []byte("<order id=" + strconv.Itoa(id) + ">")}, // undecodable
		}
		msgs = append(msgs, kinds[(id/poisonEvery)%len(kinds)])
	}
	if _, err := box.Write(ctx, tx, msgs...); err != nil {
		return err
	}
	if rand.N(20) == 0 {
		time.Sleep(time.Duration(20+rand.N(60)) * time.Millisecond)
	}
	return tx.Commit(ctx)
}

// broker is Watermill's PostgreSQL Pub/Sub in the producer's schema.
func broker(pool *pgxpool.Pool) (*sql.DB, wmsql.DefaultPostgreSQLSchema, wmsql.DefaultPostgreSQLOffsetsAdapter) {
	db := stdlib.OpenDBFromPool(pool)
	return db, wmsql.DefaultPostgreSQLSchema{
			GenerateMessagesTableName: func(topic string) string { return ident.Quote(producerSchema) + "." + ident.Quote("watermill_"+topic) },
			GeneratePayloadType:       func(string) string { return "BYTEA" },
		}, wmsql.DefaultPostgreSQLOffsetsAdapter{
			GenerateMessagesOffsetsTableName: func(topic string) string {
				return ident.Quote(producerSchema) + "." + ident.Quote("watermill_offsets_"+topic)
			},
		}
}

// natsURL is the NATS JetStream server the relays and consumers go
// through instead of watermill-sql, when the driver runs one
// (-chaos.broker=nats).
func natsURL() string { return os.Getenv("CHAOS_NATS_URL") }

// natsConn connects to NATS, or keeps trying in the background while the
// driver has it killed: a relay or consumer started meanwhile must start.
func natsConn(url string) (*nats.Conn, error) {
	return nats.Connect(url, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
}

// natsSubscriber is the consumers' JetStream subscription: a durable
// consumer group on a file-stored stream, so that a killed server loses
// nothing it acknowledged.
func natsSubscriber(url string) (message.Subscriber, error) {
	nc, err := natsConn(url)
	if err != nil {
		return nil, err
	}
	return jetstream.NewSubscriber(jetstream.SubscriberConfig{
		Conn: nc, Logger: watermill.NopLogger{}, AckWaitTimeout: 5 * time.Second,
		ResourceInitializer: jetstream.GroupedConsumer(consumerName),
	})
}

func startRelay(t *testing.T, ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) {
	var (
		pub message.Publisher
		err error
	)
	if url := natsURL(); url != "" {
		var nc *nats.Conn
		if nc, err = natsConn(url); err == nil {
			pub, err = jetstream.NewPublisher(jetstream.PublisherConfig{Conn: nc, Logger: watermill.NopLogger{}})
		}
	} else {
		db, schema, _ := broker(pool)
		pub, err = wmsql.NewPublisher(db, wmsql.PublisherConfig{SchemaAdapter: schema}, watermill.NopLogger{})
	}
	require.NoError(t, err)
	// An attempt budget small enough that a broker outage charged to the
	// rows would make them dead and fail the run: while the driver keeps
	// NATS down (natsDownFor), each relay claims the waiting rows and hands
	// them back every PublishTimeout or outage backoff, dozens of times.
	// The budget still covers the attempts the run does charge: a relay
	// SIGKILLed mid-round (its rows' lease expires), a round cut by the
	// outage after it reached the broker.
	r, err := relay.New(pool, relay.Config{
		AtomicPublisher:   natsURL() == "", // watermill-sql inserts a batch all or none
		BatchSize:         50,
		Lease:             relayLease,
		Logger:            logger,
		MaxAttempts:       relayMaxAttempts,
		OutageBackoffFunc: func(int) time.Duration { return 200 * time.Millisecond },
		PollInterval:      50 * time.Millisecond,
		// Shorter than nats.go's 5s publish timeout, so that a publish into
		// the dead server is given up, and probed again, within the outage.
		PublishTimeout:   500 * time.Millisecond,
		Publisher:        pub,
		RetryBackoffFunc: func(int) time.Duration { return 50 * time.Millisecond },
		Schema:           producerSchema,
	})
	require.NoError(t, err)
	start(t, ctx, r.Start)
}

// start retries a Start that fails while the database restarts.
func start(t *testing.T, ctx context.Context, fn func(context.Context) error) {
	var err error
	for range 200 {
		if err = fn(ctx); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal(err)
}

func startConsumer(t *testing.T, ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) {
	var (
		sub message.Subscriber
		err error
	)
	if url := natsURL(); url != "" {
		sub, err = natsSubscriber(url)
	} else {
		db, schema, offsets := broker(pool)
		sub, err = wmsql.NewSubscriber(db, wmsql.SubscriberConfig{
			ConsumerGroup: consumerName, OffsetsAdapter: offsets, PollInterval: 50 * time.Millisecond,
			ResendInterval: 100 * time.Millisecond, SchemaAdapter: schema,
		}, watermill.NopLogger{})
	}
	require.NoError(t, err)
	in, err := inbox.New(pool, inbox.Config{Consumer: consumerName, MaxAttempts: maxAttempts, Schema: consumerSchema})
	require.NoError(t, err)
	handle := watermillinbox.Handler(watermillinbox.Config{Inbox: in, Logger: logger})
	ready := make(chan struct{})
	var readyOnce sync.Once
	go func() {
		for {
			router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
			if err != nil {
				panic(err)
			}
			router.AddConsumerHandler("billing-inbox", topic, sub, handle)
			var ran atomic.Bool
			stopped := make(chan struct{})
			go func() {
				select {
				case <-router.Running():
					ran.Store(true)
					readyOnce.Do(func() { close(ready) })
				case <-stopped:
				}
			}()
			_ = router.Run(ctx)
			close(stopped)
			if ran.Load() {
				// It ran and its subscription broke (the database restarted):
				// exit, and the driver starts a new consumer, as an
				// orchestrator would.
				os.Exit(4)
			}
			time.Sleep(200 * time.Millisecond) // never got going: try again
		}
	}()
	<-ready
}

// flood redelivers already-published messages, each from eight sessions at
// once, straight into the inbox, as a broker retrying in anger would.
func flood(ctx context.Context, pool *pgxpool.Pool) {
	in, err := inbox.New(pool, inbox.Config{Consumer: consumerName, MaxAttempts: maxAttempts, Schema: consumerSchema})
	if err != nil {
		panic(err)
	}
	pick := ident.Render(`
		SELECT id::text, event_type, coalesce(ordering_key, ''), payload, metadata
		FROM /* schema */outbox WHERE status = 'published' ORDER BY random() LIMIT 20`, producerSchema)
	for {
		rows, err := pool.Query(ctx, pick)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		msgs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (inbox.Message, error) {
			var m inbox.Message
			err := r.Scan(&m.ID, &m.EventType, &m.OrderingKey, &m.Payload, &m.Metadata)
			if m.Metadata == nil {
				m.Metadata = map[string]string{}
			}
			m.Metadata[pgbox.MetadataEventType] = m.EventType
			return m, err
		})
		if err != nil || len(msgs) == 0 {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for _, m := range msgs {
					_, _ = in.Receive(ctx, m) // errors while the database restarts are fine: it is a redelivery
				}
			})
		}
		wg.Wait()
		time.Sleep(50 * time.Millisecond) // a broker in anger retries hard, but does not spin
	}
}

func startDispatcher(t *testing.T, ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) {
	sql := func(q string) string { return ident.Render(q, consumerSchema) }
	in, err := inbox.New(pool, inbox.Config{Consumer: consumerName, MaxAttempts: maxAttempts, Schema: consumerSchema})
	require.NoError(t, err)
	d, err := dispatcher.New(pool, dispatcher.Config{
		Inbox:          in,
		BatchSize:      16,
		HandlerTimeout: 500 * time.Millisecond,
		Lease:          time.Second,
		Logger:         logger,
		PollInterval:   50 * time.Millisecond,
		RetryBackoffFunc: func(attempt int) time.Duration {
			return min(20*time.Millisecond<<attempt, 400*time.Millisecond)
		},
		Workers: 4,
		Handlers: map[string]dispatcher.Handler{
			typeOrderPlaced: dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
				var o order
				if err := json.Unmarshal(m.Payload, &o); err != nil {
					return fmt.Errorf("undecodable order: %w", err)
				}
				if m.Attempt == 1 {
					// These usually time out and fail the attempt. When they
					// do not (the lock holder is reconnecting after a cut or
					// a restart), the handler goes on to its effect, as a
					// real one would.
					switch o.ID % 100 {
					case 7: // a statement that runs past its timeout
						if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = '20ms'; SELECT pg_sleep(0.2)"); err != nil {
							return err
						}
					case 13: // a row lock that is not granted in time
						if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '20ms'"); err != nil {
							return err
						}
						if _, err := tx.Exec(ctx, sql("SELECT id FROM /* schema */hot WHERE id = 1 FOR UPDATE")); err != nil {
							return err
						}
					}
				}
				_, err := tx.Exec(ctx, sql("INSERT INTO /* schema */effects (order_id, message_id, attempt, pid) VALUES ($1, $2, $3, $4)"),
					o.ID, m.ID, m.Attempt, os.Getpid())
				return err
			}),
			typeEmailRequested: dispatcher.Leased(func(ctx context.Context, m *dispatcher.Message) error {
				var o order
				if err := json.Unmarshal(m.Payload, &o); err != nil {
					return dispatcher.Permanent(err)
				}
				// The outside call: committed on its own, before the done mark.
				_, err := pool.Exec(ctx, sql("INSERT INTO /* schema */emails (order_id, idempotency_key) VALUES ($1, $2)"), o.ID, m.IdempotencyKey())
				return err
			}),
			typePoisonFail: dispatcher.InTx(func(context.Context, pgx.Tx, *dispatcher.Message) error {
				return errors.New("poison: this message always fails")
			}),
			typePoisonPanic: dispatcher.InTx(func(context.Context, pgx.Tx, *dispatcher.Message) error {
				panic("poison: this message always panics")
			}),
		},
	})
	require.NoError(t, err)
	start(t, ctx, d.Start)
}

// holdHotRow keeps the hot table locked for the whole run, so that handlers
// asking for its row hit their lock timeout; after a restart it locks it
// again. It takes a table lock, which needs no transaction id: a row lock
// would give its transaction one, and an open transaction with an id holds
// back watermill-sql's subscribers (they read only what committed before
// the oldest transaction still running) for as long as it stays open.
func holdHotRow(ctx context.Context, pool *pgxpool.Pool) {
	for {
		tx, err := pool.Begin(ctx)
		if err == nil {
			_, err = tx.Exec(ctx, ident.Render("LOCK TABLE /* schema */hot IN EXCLUSIVE MODE", consumerSchema))
			for err == nil {
				time.Sleep(200 * time.Millisecond)
				err = tx.Conn().Ping(ctx)
			}
			_ = tx.Rollback(ctx)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
