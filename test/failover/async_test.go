package failover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/migrations"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
	"github.com/pgbox/pgbox/watermillinbox"
)

// TestFailoverAsyncReplication promotes a standby that never got the last
// commits (scripts/pgpair.sh: a primary and an asynchronous streaming
// standby) and counts what pgbox then does. The producer's service runs on
// the pair: its orders with their outbox messages, a relay, and an inbox of
// its own ("shipping") whose dispatcher has an in-transaction handler (its
// effect a row on the pair) and a leased one (its outside call a row at
// another service: the stable server, DATABASE_URL). The consumer's service,
// whose inbox ("billing") the relay's messages reach through NATS
// JetStream, runs on the stable server.
//
// The work comes in three batches. A is done before anything goes wrong.
// B is written while the test holds the pipeline (the publisher says the
// broker is unreachable, the handlers snooze), the standby replays it, the
// standby is detached, and only then does B go through: its published and
// done marks, its in-transaction effects, are on the primary alone; its
// outside calls and deliveries are made. C is written and goes through
// after the detach: all of it is on the primary alone. Then the primary is
// SIGKILLed, the standby promoted, and the same components (no restart)
// carry on against it through the multi-host URL. The test asserts what
// pgbox promises for what the new primary has (B's messages handled again,
// their in-database effect once, their outside calls repeated under the same
// idempotency key, their outbox rows published again and deduped by the
// consumer; A untouched), asserts that C was really lost, so that the run
// cannot pass vacuously, and reports C's consequences, the database's loss,
// which synchronous replication prevents.
func TestFailoverAsyncReplication(t *testing.T) {
	t.Parallel()
	pair := startServers(t, "pgpair.sh", "PGBOX_PGPAIR_DIR")
	r := startAsyncRun(t, pair)

	r.write(t, batchA)
	r.waitSettled(t, "batch A")

	r.held.Store(true)
	r.write(t, batchB)
	r.waitReplayed(t, pair)
	pair.must(t, "detach-standby")
	r.held.Store(false)
	r.waitSettled(t, "batch B on the primary alone")
	r.write(t, batchC)
	r.waitSettled(t, "batch C on the primary alone")

	killed := time.Now()
	pair.must(t, "kill-primary")
	pair.must(t, "promote")
	promoted := time.Since(killed)
	r.waitSettled(t, "the pipeline on the promoted standby")
	settled := time.Since(killed)

	r.check(t, promoted, settled)
}

// asyncBatch is how many orders, and how many messages of the shipping
// inbox (half for each handler), a batch has.
const asyncBatch = 20

// shipping is the producer's own inbox consumer, on the pair.
const shipping = "shipping"

// batch is one of the test's batches of work: its orders' ids are
// first+1 … first+asyncBatch.
type batch struct {
	name  string
	first int
}

var (
	batchA  = batch{"A", 0}
	batchB  = batch{"B", 1000}
	batchC  = batch{"C", 2000}
	batches = []batch{batchA, batchB, batchC}
)

// orders returns the batch's order ids.
func (b batch) orders() []int {
	ids := make([]int, asyncBatch)
	for i := range ids {
		ids[i] = b.first + i + 1
	}
	return ids
}

// outboxIDs returns the ids of the batch's outbox messages, one per order.
func (b batch) outboxIDs() []string {
	var ids []string
	for _, id := range b.orders() {
		ids = append(ids, messageID(id, typeOrderPlaced).String())
	}
	return ids
}

// inboxIDs returns the ids of the batch's shipping messages handled in the
// transaction (typeOrderPlaced) or leased (typeEmailRequested).
func (b batch) inboxIDs(eventType string) []string {
	var ids []string
	for i := range asyncBatch / 2 {
		ids = append(ids, fmt.Sprintf("%s-%s-%d", b.name, eventType, i))
	}
	return ids
}

// tally counts events by message id, in the test process.
type tally struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *tally) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[id]++
}

// of returns, for ids, the sum of their counts and how many were counted
// more than once.
func (c *tally) of(ids []string) (sum, more int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		sum += c.n[id]
		if c.n[id] > 1 {
			more++
		}
	}
	return sum, more
}

// covers reports whether c has counted every id at least as often as
// other has.
func (c *tally) covers(other *tally) bool {
	other.mu.Lock()
	want := maps.Clone(other.n)
	other.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, n := range want {
		if c.n[id] < n {
			return false
		}
	}
	return true
}

// heldPublisher is the relay's publisher: while the test holds the
// pipeline it says the broker is unreachable (an outage, which costs no
// attempt); otherwise it publishes and counts each message's publishes.
type heldPublisher struct {
	message.Publisher
	held      *atomic.Bool
	published *tally
}

func (p heldPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.held.Load() {
		return fmt.Errorf("the test holds the pipeline: %w", relay.ErrBrokerUnreachable)
	}
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	for _, m := range msgs {
		p.published.add(m.UUID)
	}
	return nil
}

// asyncRun is the two services of TestFailoverAsyncReplication.
type asyncRun struct {
	pool     *pgxpool.Pool // the pair, by its multi-host URL
	schema   string        // the producer's, on the pair
	stable   *pgxpool.Pool // the stable server: the consumer and the outside service
	consumer string        // the consumer's schema there, which holds the outside service's table too
	topic    string
	box      *outbox.Outbox
	shipping *inbox.Inbox

	held      atomic.Bool // the pipeline is held (the publisher refuses, the handlers snooze)
	published tally       // successful publishes by outbox message id
	delivered tally       // deliveries to the consumer by message id
	handled   tally       // the shipping in-transaction handler's runs by message id
}

func (r *asyncRun) sql(q string) string       { return ident.Render(q, r.schema) }
func (r *asyncRun) stableSQL(q string) string { return ident.Render(q, r.consumer) }

// startAsyncRun makes both services' tables and starts their components,
// each stopped when the test ends.
func startAsyncRun(t *testing.T, pair *cluster) *asyncRun {
	ctx := context.Background()
	logger := fileLogger(t)
	r := &asyncRun{pool: pair.pool(t, 16), schema: "async", stable: pgtest.Pool(t), consumer: pgtest.Schema(t)}
	require.NoError(t, migrations.Migrate(ctx, r.pool, migrations.Options{Schema: r.schema}))
	for _, q := range []string{
		"CREATE TABLE /* schema */orders (id int PRIMARY KEY)",
		// No unique keys: a second effect or call would show.
		"CREATE TABLE /* schema */effects (message_id text NOT NULL)",
	} {
		_, err := r.pool.Exec(ctx, r.sql(q))
		require.NoError(t, err)
	}
	for _, q := range []string{
		"CREATE TABLE /* schema */calls (message_id text NOT NULL, idempotency_key text NOT NULL)",
		"CREATE TABLE /* schema */consumer_effects (message_id text NOT NULL)",
	} {
		_, err := r.stable.Exec(ctx, r.stableSQL(q))
		require.NoError(t, err)
	}
	var err error
	r.box, err = outbox.New(r.pool, outbox.Config{Schema: r.schema})
	require.NoError(t, err)
	r.topic = fmt.Sprintf("failover_async_%d", time.Now().UnixNano())
	b := natsBroker(t, r.topic, logger)

	// The consumer: its inbox and dispatcher on the stable server.
	billing, err := inbox.New(r.stable, inbox.Config{Consumer: consumerName, Schema: r.consumer})
	require.NoError(t, err)
	store := watermillinbox.Handler(watermillinbox.Config{Inbox: billing, Logger: logger})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NewSlogLogger(logger))
	require.NoError(t, err)
	router.AddConsumerHandler("billing-inbox", b.topic, b.subscriber, func(m *message.Message) error {
		r.delivered.add(m.UUID)
		return store(m)
	})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- router.Run(runCtx) }()
	// As in startPipeline: a failed test leaves the router running, which
	// watermill-nats would make panic on a delivery on its way.
	t.Cleanup(func() {
		if !t.Failed() {
			cancel()
			<-done
		}
	})
	<-router.Running()
	r.startDispatcher(t, r.stable, billing, dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
		_, err := tx.Exec(ctx, r.stableSQL("INSERT INTO /* schema */consumer_effects (message_id) VALUES ($1)"), m.ID)
		return err
	}), nil, logger)

	// The producer: its relay, its inbox and dispatcher, on the pair.
	rel, err := relay.New(r.pool, relay.Config{
		Lease:             lease,
		Logger:            logger,
		OutageBackoffFunc: func(int) time.Duration { return 20 * time.Millisecond },
		PollInterval:      100 * time.Millisecond,
		Publisher:         heldPublisher{Publisher: b.publisher, held: &r.held, published: &r.published},
		RetryBackoffFunc:  func(int) time.Duration { return 50 * time.Millisecond },
		Schema:            r.schema,
	})
	require.NoError(t, err)
	require.NoError(t, rel.Start(ctx))
	t.Cleanup(func() { stop(t, rel.Stop) })
	r.shipping, err = inbox.New(r.pool, inbox.Config{Consumer: shipping, Schema: r.schema})
	require.NoError(t, err)
	r.startDispatcher(t, r.pool, r.shipping, dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
		if r.held.Load() {
			return dispatcher.Snooze(20 * time.Millisecond)
		}
		if _, err := tx.Exec(ctx, r.sql("INSERT INTO /* schema */effects (message_id) VALUES ($1)"), m.ID); err != nil {
			return err
		}
		r.handled.add(m.ID)
		return nil
	}), func(ctx context.Context, m *dispatcher.Message) error {
		if r.held.Load() {
			return dispatcher.Snooze(20 * time.Millisecond)
		}
		// The outside call, which the failover does not undo.
		_, err := r.stable.Exec(ctx, r.stableSQL("INSERT INTO /* schema */calls (message_id, idempotency_key) VALUES ($1, $2)"), m.ID, m.IdempotencyKey())
		return err
	}, logger)
	return r
}

// startDispatcher starts a dispatcher of in's, with inTx for
// typeOrderPlaced and, if not nil, leased for typeEmailRequested, stopped
// when the test ends.
func (r *asyncRun) startDispatcher(t *testing.T, pool *pgxpool.Pool, in *inbox.Inbox, inTx dispatcher.Handler, leased dispatcher.LeasedFunc, logger *slog.Logger) {
	handlers := map[string]dispatcher.Handler{typeOrderPlaced: inTx}
	if leased != nil {
		handlers[typeEmailRequested] = dispatcher.Leased(leased)
	}
	d, err := dispatcher.New(pool, dispatcher.Config{
		Handlers:         handlers,
		HandlerTimeout:   lease / 2,
		Inbox:            in,
		Lease:            lease,
		Logger:           logger,
		PollInterval:     100 * time.Millisecond,
		RetryBackoffFunc: func(int) time.Duration { return 50 * time.Millisecond },
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() { stop(t, d.Stop) })
}

// write commits batch b's orders, each with its outbox message in the
// order's transaction, and stores its shipping messages.
func (r *asyncRun) write(t *testing.T, b batch) {
	ctx := context.Background()
	for _, id := range b.orders() {
		body, err := json.Marshal(map[string]int{"order": id})
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, r.sql("INSERT INTO /* schema */orders (id) VALUES ($1)"), id); err != nil {
				return err
			}
			_, err := r.box.Write(ctx, tx, outbox.Message{Topic: r.topic, EventType: typeOrderPlaced, ID: messageID(id, typeOrderPlaced), Payload: body})
			return err
		}))
	}
	var msgs []inbox.Message
	for _, eventType := range []string{typeOrderPlaced, typeEmailRequested} {
		for _, id := range b.inboxIDs(eventType) {
			msgs = append(msgs, inbox.Message{EventType: eventType, ID: id, Payload: []byte(`{}`)})
		}
	}
	_, err := r.shipping.ReceiveBatch(ctx, msgs)
	require.NoError(t, err)
}

// waitReplayed waits until the standby has replayed everything the
// primary has written so far.
func (r *asyncRun) waitReplayed(t *testing.T, pair *cluster) {
	ctx := context.Background()
	var lsn string
	require.NoError(t, r.pool.QueryRow(ctx, "SELECT pg_catalog.pg_current_wal_lsn()::text").Scan(&lsn))
	standby, err := pgx.Connect(ctx, pair.must(t, "url", "standby"))
	require.NoError(t, err)
	defer standby.Close(ctx)
	require.Eventually(t, func() bool {
		var replayed bool
		err := standby.QueryRow(ctx, "SELECT pg_catalog.pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).Scan(&replayed)
		return err == nil && replayed
	}, time.Minute, 20*time.Millisecond, "the standby did not replay the primary's WAL up to %s", lsn)
}

// waitSettled waits until everything the pair has is through: every
// outbox row published and in the consumer's inbox, every publish
// delivered, every message of both inboxes done.
func (r *asyncRun) waitSettled(t *testing.T, what string) {
	ctx := context.Background()
	require.Eventually(t, func() bool {
		var ids []string
		rows, err := r.pool.Query(ctx, r.sql("SELECT id::text FROM /* schema */outbox"))
		if err == nil {
			ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		return err == nil && r.delivered.covers(&r.published) &&
			r.count(r.pool, r.sql("SELECT count(*) FROM /* schema */outbox WHERE status <> 'published'")) == 0 &&
			r.count(r.pool, r.sql("SELECT count(*) FROM /* schema */inbox WHERE status <> 'done'")) == 0 &&
			r.count(r.stable, r.stableSQL(`SELECT count(*) FROM unnest($1::text[]) AS o(id) WHERE NOT EXISTS (
				SELECT 1 FROM /* schema */inbox AS i WHERE i.consumer = $2 AND i.message_id = o.id AND i.status = 'done')`), ids, consumerName) == 0
	}, 2*time.Minute, 50*time.Millisecond, "timed out waiting for %s to settle", what)
}

// count runs a count query on db, -1 while it fails.
func (r *asyncRun) count(db *pgxpool.Pool, q string, args ...any) int {
	var n int
	if err := db.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		return -1
	}
	return n
}

// asyncCounts is what TestFailoverAsyncReplication finds for one batch:
// rows on the promoted standby and at the stable server, and the test's
// own tallies.
type asyncCounts struct {
	orders                     int // orders on the new primary
	published, publishedAgain  int // publishes; outbox messages published more than once
	delivered, deliveredAgain  int // deliveries to the consumer; messages delivered more than once
	accepted, consumerOnce     int // in the consumer's inbox; of which with one effect there
	consumerTwice, orphans     int // with more than one effect; in the consumer's inbox, their order not on the new primary
	shipping, shippingDone     int // shipping messages on the new primary; of which done
	handled, handledAgain      int // in-transaction handler runs; messages handled more than once
	effectsOnce, effectsTwice  int // in-transaction messages with one effect on the new primary; with more
	calls, calledAgain         int // outside calls; leased messages called more than once
	keysVaried, callsOfTheLost int // leased messages called under several keys; called though not on the new primary
}

// counts counts batch b from the new primary, the stable server and the
// tallies.
func (r *asyncRun) counts(t *testing.T, b batch) asyncCounts {
	ctx := context.Background()
	var c asyncCounts
	c.published, c.publishedAgain = r.published.of(b.outboxIDs())
	c.delivered, c.deliveredAgain = r.delivered.of(b.outboxIDs())
	inTx, leased := b.inboxIDs(typeOrderPlaced), b.inboxIDs(typeEmailRequested)
	c.handled, c.handledAgain = r.handled.of(inTx)

	rows, err := r.pool.Query(ctx, r.sql("SELECT id FROM /* schema */orders WHERE id = ANY($1)"), b.orders())
	require.NoError(t, err)
	kept, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	c.orders = len(kept)
	var lostOrders []string
	for _, id := range b.orders() {
		if !slices.Contains(kept, id) {
			lostOrders = append(lostOrders, messageID(id, typeOrderPlaced).String())
		}
	}
	require.NoError(t, r.pool.QueryRow(ctx, r.sql(`SELECT count(*), count(*) FILTER (WHERE status = 'done') FROM /* schema */inbox WHERE consumer = $1 AND message_id = ANY($2)`),
		shipping, append(inTx, leased...)).Scan(&c.shipping, &c.shippingDone))
	require.NoError(t, r.pool.QueryRow(ctx, r.sql(`
		SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n > 1)
		FROM unnest($1::text[]) AS m(id) LEFT JOIN (SELECT message_id, count(*) AS n FROM /* schema */effects GROUP BY 1) AS e ON e.message_id = m.id`),
		inTx).Scan(&c.effectsOnce, &c.effectsTwice))
	require.NoError(t, r.stable.QueryRow(ctx, r.stableSQL(`
		SELECT count(*), count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n > 1), count(*) FILTER (WHERE m.id = ANY($3))
		FROM unnest($1::text[]) AS m(id)
		JOIN /* schema */inbox AS i ON i.consumer = $2 AND i.message_id = m.id
		LEFT JOIN (SELECT message_id, count(*) AS n FROM /* schema */consumer_effects GROUP BY 1) AS e ON e.message_id = m.id`),
		b.outboxIDs(), consumerName, lostOrders).Scan(&c.accepted, &c.consumerOnce, &c.consumerTwice, &c.orphans))
	rows, err = r.pool.Query(ctx, r.sql("SELECT message_id FROM /* schema */inbox WHERE consumer = $1 AND message_id = ANY($2)"), shipping, leased)
	require.NoError(t, err)
	leasedKept, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NoError(t, r.stable.QueryRow(ctx, r.stableSQL(`
		SELECT coalesce(sum(n), 0), count(*) FILTER (WHERE n > 1), count(*) FILTER (WHERE keys > 1), coalesce(sum(n) FILTER (WHERE NOT message_id = ANY($2)), 0)
		FROM (SELECT message_id, count(*) AS n, count(DISTINCT idempotency_key) AS keys FROM /* schema */calls WHERE message_id = ANY($1) GROUP BY 1) AS c`),
		leased, leasedKept).Scan(&c.calls, &c.calledAgain, &c.keysVaried, &c.callsOfTheLost))
	return c
}

// check counts each batch, logs the counts (and appends them to
// -failover.report) and asserts what pgbox promises for what the new
// primary has.
func (r *asyncRun) check(t *testing.T, promoted, settled time.Duration) {
	counts := map[string]asyncCounts{}
	for _, b := range batches {
		counts[b.name] = r.counts(t, b)
	}
	report := asyncMarkdown(counts, promoted, settled)
	t.Log("\n" + report)
	if *flagReport != "" {
		file, err := os.OpenFile(*flagReport, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		require.NoError(t, err)
		_, err = file.WriteString(report + "\n")
		require.NoError(t, errors.Join(err, file.Close()))
	}

	const n, half = asyncBatch, asyncBatch / 2
	for _, b := range batches {
		c := counts[b.name]
		require.Zero(t, c.consumerTwice, "batch %s: messages the consumer applied twice", b.name)
		require.Equal(t, c.accepted, c.consumerOnce, "batch %s: messages in the consumer's inbox applied once", b.name)
		require.Equal(t, c.shipping, c.shippingDone, "batch %s: shipping messages on the new primary not done", b.name)
		require.Zero(t, c.effectsTwice, "batch %s: in-transaction effects that happened twice on the new primary", b.name)
		require.Zero(t, c.keysVaried, "batch %s: outside calls repeated under another idempotency key", b.name)
	}
	// A: done before anything went wrong; nothing happens again.
	a := counts[batchA.name]
	require.Equal(t, asyncCounts{
		orders: n, published: n, delivered: a.delivered, deliveredAgain: a.deliveredAgain, accepted: n, consumerOnce: n,
		shipping: n, shippingDone: n, handled: half, effectsOnce: half, calls: half,
	}, a, "batch A, done before the detach: kept, and nothing done again")
	// B: its marks were lost, its messages' arrival was not.
	b := counts[batchB.name]
	require.Equal(t, n, b.orders, "batch B: orders committed before the detach are on the new primary")
	require.Equal(t, n, b.publishedAgain, "batch B: outbox rows whose published mark was lost are published again")
	require.Equal(t, n, b.deliveredAgain, "batch B: the consumer receives them again")
	require.Equal(t, n, b.accepted, "batch B: the consumer's inbox dedupes them")
	require.Equal(t, n, b.consumerOnce, "batch B: the consumer applies each once")
	require.Equal(t, n, b.shippingDone, "batch B: the shipping messages are done on the new primary")
	require.Equal(t, half, b.handledAgain, "batch B: messages whose done mark was lost are handled again")
	require.Equal(t, half, b.effectsOnce, "batch B: their in-database effect, lost with the mark, happens once")
	require.Equal(t, half, b.calledAgain, "batch B: leased handlers' outside calls are made again")
	// C: written after the detach, lost with the old primary; the test
	// only reports what became of it, but it must have been lost, or the
	// run proves nothing.
	c := counts[batchC.name]
	require.Zero(t, c.orders, "batch C: written after the detach, yet on the new primary: the standby was not detached")
	require.Zero(t, c.shipping, "batch C: stored after the detach, yet on the new primary: the standby was not detached")
}

// asyncMarkdown renders the counts as a table, a column per batch.
func asyncMarkdown(counts map[string]asyncCounts, promoted, settled time.Duration) string {
	var b strings.Builder
	fmt.Fprintln(&b, "### Failover run: asynchronous standby promoted without the last commits")
	fmt.Fprintf(&b, "\nThe standby took writes %s after the primary was killed; the pipeline had settled on it %s after the kill (load average %s).\n\n",
		promoted.Round(10*time.Millisecond), settled.Round(10*time.Millisecond), loadAverage())
	fmt.Fprintf(&b, "%d orders (one outbox message each) and %d shipping messages (%d in-transaction, %d leased) a batch: "+
		"A done before the detach; B written before it, handled after it; C written and handled after it.\n\n", asyncBatch, asyncBatch, asyncBatch/2, asyncBatch/2)
	fmt.Fprintln(&b, "| counted | A | B | C |")
	fmt.Fprintln(&b, "|---|---:|---:|---:|")
	row := func(what string, v func(asyncCounts) int) {
		fmt.Fprintf(&b, "| %s |", what)
		for _, bt := range batches {
			fmt.Fprintf(&b, " %d |", v(counts[bt.name]))
		}
		fmt.Fprintln(&b)
	}
	row("orders on the new primary", func(c asyncCounts) int { return c.orders })
	row("outbox messages published (publishes)", func(c asyncCounts) int { return c.published })
	row("… messages published more than once", func(c asyncCounts) int { return c.publishedAgain })
	row("deliveries to the consumer", func(c asyncCounts) int { return c.delivered })
	row("in the consumer's inbox (distinct)", func(c asyncCounts) int { return c.accepted })
	row("… applied once by the consumer", func(c asyncCounts) int { return c.consumerOnce })
	row("… applied twice: must be 0", func(c asyncCounts) int { return c.consumerTwice })
	row("… **whose order the new primary lacks**", func(c asyncCounts) int { return c.orphans })
	row("shipping messages on the new primary", func(c asyncCounts) int { return c.shipping })
	row("… done", func(c asyncCounts) int { return c.shippingDone })
	row("in-transaction handler runs", func(c asyncCounts) int { return c.handled })
	row("… messages handled more than once", func(c asyncCounts) int { return c.handledAgain })
	row("… with their effect once on the new primary", func(c asyncCounts) int { return c.effectsOnce })
	row("… with it more than once: must be 0", func(c asyncCounts) int { return c.effectsTwice })
	row("leased handlers' outside calls", func(c asyncCounts) int { return c.calls })
	row("… messages called more than once", func(c asyncCounts) int { return c.calledAgain })
	row("… under differing idempotency keys: must be 0", func(c asyncCounts) int { return c.keysVaried })
	row("… **calls for messages the new primary lacks**", func(c asyncCounts) int { return c.callsOfTheLost })
	return b.String()
}

// loadAverage is the machine's load average over 1, 5 and 15 minutes, or
// "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if fields := strings.Fields(string(b)); err == nil && len(fields) >= 3 {
		return strings.Join(fields[:3], " ")
	}
	return "unknown"
}
