// Package failover runs pgbox through a PostgreSQL failover: a
// pg_auto_failover cluster of the test's own (scripts/pgaf.sh, a monitor, a
// primary and a secondary with synchronous replication), whose primary is
// SIGKILLed under load and its secondary promoted, and then a planned
// switchover. Every pgbox component runs in the test process on one pool
// over the cluster's multi-host URL (target_session_attrs=read-write), as a
// service of such a cluster would: a producer writing orders and their
// outbox messages, a relay publishing them through NATS JetStream, a
// Watermill consumer storing them in an inbox, a dispatcher handling them
// (in the transaction, and leased), a maintainer (River's leader election
// and periodic jobs), and an HTTP endpoint behind the idempotency
// middleware with a client that retries. None of them is restarted. Once
// the load has settled, a checker counts from the new primary what was
// acknowledged, published, received and applied, and fails unless nothing
// was lost and nothing happened twice; the test logs when each component
// worked again after the fault (docs/operations.md, "Failover", gives the
// figures).
package failover

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/idempotency"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/dberr"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/natstest"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/maintenance"
	"github.com/pgbox/pgbox/migrations"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
	"github.com/pgbox/pgbox/watermillinbox"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestFailover kills the primary under load, then, once the killed node
// has rejoined as the secondary, switches over: the same load, the same
// counts.
func TestFailover(t *testing.T) {
	cl := startCluster(t)
	t.Run("PrimaryKilled", func(t *testing.T) {
		runUnderLoad(t, cl, "killed", false, func(t *testing.T) bool { cl.must(t, "kill-primary"); return true })
	})
	// A switchover in which the cluster itself lost commits (see
	// cluster.switchover) proves nothing about pgbox: it is made again,
	// on a new run, up to twice.
	for try := 1; try <= 3; try++ {
		cl.must(t, "up") // the old primary rejoins, as the secondary
		var void bool
		t.Run("Switchover", func(t *testing.T) {
			void = runUnderLoad(t, cl, "switchover", true, cl.switchover)
		})
		if !void {
			return
		}
	}
	t.Fatal("in three switchovers in a row, pg_auto_failover's old primary committed without its secondary (pg_auto_failover#774)")
}

// The consumer's name and the event types: OrderPlaced's handler writes its
// effect in the transaction that marks the message done; EmailRequested's
// is leased, its outside call (a row committed on its own) made before the
// done mark.
const (
	consumerName       = "billing"
	typeOrderPlaced    = "OrderPlaced"
	typeEmailRequested = "EmailRequested"
)

// warmup is how many orders are handled before the fault, and after is how
// many more are acknowledged after every component has worked again.
const (
	warmup = 100
	after  = 100
)

// lease is the relay's and the dispatcher's lease, shorter than their
// defaults (a minute, and a minute more than the handler timeout) to keep
// the test short: a row claimed on the old primary whose outcome was not
// recorded there is claimed again once its lease has passed.
const lease = 5 * time.Second

// load is one run's workload and what it observed.
type load struct {
	pool   *pgxpool.Pool
	schema string
	topic  string
	logger *slog.Logger

	orders  atomic.Int64 // orders whose commit the producer saw succeed
	charges atomic.Int64 // HTTP requests answered 2xx

	mu       sync.Mutex
	faultAt  time.Time // when the fault began (zero before)
	lastOK   map[string]time.Time
	pause    map[string]time.Duration
	acked    []int    // order ids the producer saw committed
	answered []string // idempotency keys answered 2xx
	refused  int      // HTTP answers other than 2xx (retried)
}

func (l *load) sql(q string) string { return ident.Render(q, l.schema) }

// ok records that component worked at time at, for its longest pause since
// the fault.
func (l *load) ok(component string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.faultAt.IsZero() {
		return
	}
	if gap := at.Sub(later(l.lastOK[component], l.faultAt)); gap > l.pause[component] {
		l.pause[component] = gap
	}
	l.lastOK[component] = at
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// runUnderLoad runs the whole pipeline on the cluster in schema
// "failover_"+name, injects fault once warmup orders are handled, keeps the
// load on until every component has worked on the new primary and after
// more orders are acknowledged, lets it settle and checks it (see check:
// planned is a switchover's stricter check).
//
// fault reports whether the cluster kept every commit it acknowledged. If
// it did not, nothing can be counted: the run only waits for the rows
// left to settle, checks nothing lost or done twice, and reports itself
// void.
func runUnderLoad(t *testing.T, cl *cluster, name string, planned bool, fault func(*testing.T) (kept bool)) (void bool) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup // the producer and the HTTP client
	defer wg.Wait()
	defer cancel()
	began := time.Now()
	phase := func(what string) { t.Logf("%s: %s at %s", name, what, time.Since(began).Round(100*time.Millisecond)) }
	l := &load{
		pool:   cl.pool(t, 24),
		schema: "failover_" + name,
		logger: fileLogger(t),
		lastOK: map[string]time.Time{},
		pause:  map[string]time.Duration{},
	}
	l.setup(t)
	l.topic = "failover_" + name + "_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	b := natsBroker(t, l.topic, l.logger)
	l.startPipeline(t, b)
	l.startMaintainer(t)
	post := l.startHTTP(t)

	wg.Go(func() { l.produce(ctx) })
	wg.Go(func() { l.request(ctx, post) })

	l.waitFor(t, "the warm-up", 2*time.Minute, func() bool {
		return l.count("SELECT count(*) FROM /* schema */effects") >= warmup && l.charges.Load() >= 10
	})
	phase("warmed up")
	l.mu.Lock()
	l.faultAt = time.Now()
	l.mu.Unlock()
	void = !fault(t)
	primary := cl.must(t, "wait-primary")
	promoted := time.Now()
	phase(fmt.Sprintf("the new primary %s took writes %s after the fault began", primary, promoted.Sub(l.faultAt).Round(10*time.Millisecond)))

	// Keep the load on until every component has worked on the new
	// primary (after promoted, the old one takes no writes), then for after
	// more orders.
	var last atomic.Pointer[map[string]time.Duration] // as last read, for the failure message
	require.Eventually(t, func() bool {
		worked := l.recovery(promoted)
		last.Store(&worked)
		return len(worked) == len(components)
	}, 2*time.Minute, 50*time.Millisecond, failure(func() string {
		worked := map[string]time.Duration{}
		if p := last.Load(); p != nil {
			worked = *p
		}
		var missing []string
		for _, c := range components {
			if _, ok := worked[c]; !ok {
				missing = append(missing, c)
			}
		}
		return "these components did not work on the new primary within 2 minutes: " + strings.Join(missing, "; ")
	}))
	phase("every component worked on the new primary")
	ordersThen := l.orders.Load()
	l.waitFor(t, "more orders", time.Minute, func() bool { return l.orders.Load() >= ordersThen+after })
	cancel()
	wg.Wait()
	pauses := l.recovery(promoted)

	// Settled: every outbox row published, delivered to the inbox, and
	// handled. A failure lists what is still not.
	unsettled := []struct{ what, rows string }{
		{"outbox rows not published", `SELECT o.id::text, o.status, o.attempts, coalesce(o.last_error, ''), o.available_at::text
			FROM /* schema */outbox AS o WHERE o.status <> 'published'`},
		{"outbox rows not in the inbox", `SELECT o.id::text, o.status, o.attempts, coalesce(o.last_error, ''), coalesce(o.published_at::text, '')
			FROM /* schema */outbox AS o
			WHERE NOT EXISTS (SELECT 1 FROM /* schema */inbox AS i WHERE i.consumer = '` + consumerName + `' AND i.message_id = o.id::text)`},
		{"inbox rows not done", `SELECT i.message_id, i.status, i.attempts, coalesce(i.last_error, ''), i.available_at::text
			FROM /* schema */inbox AS i WHERE i.status <> 'done'`},
	}
	if void { // a delivery the cluster lost the inbox row of was acknowledged: it never comes again
		unsettled = slices.Delete(unsettled, 1, 2)
	}
	require.Eventually(t, func() bool {
		for _, u := range unsettled {
			if l.count(`SELECT count(*) FROM (`+u.rows+`) AS u`) != 0 {
				return false
			}
		}
		return true
	}, 2*time.Minute, 50*time.Millisecond, failure(func() string {
		msg := "timed out waiting for the load to settle:"
		for _, u := range unsettled {
			msg += fmt.Sprintf("\n%d %s", l.count(`SELECT count(*) FROM (`+u.rows+`) AS u`), u.what)
			rows, err := l.pool.Query(context.Background(), l.sql(u.rows+` LIMIT 10`))
			if err != nil {
				msg += ": " + err.Error()
				continue
			}
			for rows.Next() {
				var id, status, lastError, at string
				var attempts int
				if rows.Scan(&id, &status, &attempts, &lastError, &at) == nil {
					msg += fmt.Sprintf("\n  %s %s, %d attempts, %s, last error %q", id, status, attempts, at, lastError)
				}
			}
			rows.Close()
		}
		return msg
	}))
	phase("settled")
	if void {
		t.Logf("%s: void, not checked: the cluster lost commits it had acknowledged (scripts/pgaf.sh switchover says why)", name)
		return true
	}
	l.check(t, name, planned, promoted, pauses)
	return false
}

// components are what the test times, in the order reported.
var components = []string{
	"producer: order and outbox.Write committed",
	"relay: a row published",
	"inbox: a delivery stored (watermillinbox)",
	"dispatcher: an in-transaction handler's message done",
	"dispatcher: a leased handler's message done",
	"dispatcher: LISTEN again",
	"relay: LISTEN again",
	"maintenance: a River job run by the leader",
	"idempotency middleware: a request answered 2xx",
}

// recovery returns, for each component that has worked since promoted,
// its longest pause since the fault began: the longest time between the
// fault and its first success, or between two successes. It reads the
// test's own observations, the rows' times (the new primary's clock, on
// this machine) and, for a LISTEN, when its connection began
// (pg_stat_activity): a listener reconnects only when its connection is
// lost, so its pause is from the fault to its new connection.
func (l *load) recovery(promoted time.Time) map[string]time.Duration {
	l.mu.Lock()
	faultAt := l.faultAt
	out := map[string]time.Duration{}
	for c, at := range l.lastOK {
		if at.After(promoted) {
			out[c] = l.pause[c]
		}
	}
	l.mu.Unlock()
	// pause reads a component's successes, ts, from its rows; it has
	// worked on the new primary if one came after since.
	pause := func(component string, since time.Time, ts, from, where string, args ...any) {
		var (
			worked  bool
			seconds float64
		)
		q := `SELECT coalesce(max(ts) > $2, false), coalesce(extract(epoch FROM max(gap)), 0)::float8
		      FROM (SELECT ts, ts - lag(ts) OVER (ORDER BY ts) AS gap
		            FROM (SELECT $1::timestamptz AS ts UNION ALL SELECT ` + ts + ` FROM ` + from + ` WHERE ` + ts + ` > $1 AND ` + where + `) AS s) AS g`
		err := l.pool.QueryRow(context.Background(), l.sql(q), append([]any{faultAt, since}, args...)...).Scan(&worked, &seconds)
		if err == nil && worked {
			out[component] = time.Duration(seconds * float64(time.Second))
		}
	}
	pause(components[1], promoted, "published_at", "/* schema */outbox", "true")
	pause(components[2], promoted, "received_at", "/* schema */inbox", "true")
	pause(components[3], promoted, "processed_at", "/* schema */inbox", "event_type = $3", typeOrderPlaced)
	pause(components[4], promoted, "processed_at", "/* schema */inbox", "event_type = $3", typeEmailRequested)
	// A listener's connection is named after its component
	// (internal/workloop); the cluster runs one test's components at a
	// time. pg_stat_activity is the new primary's (the pool's), so any
	// connection made since the fault counts, even one made before the
	// test saw the promotion.
	pause(components[5], faultAt, "backend_start", "pg_catalog.pg_stat_activity", "application_name = $3", "pgbox dispatcher ("+consumerName+") listener")
	pause(components[6], faultAt, "backend_start", "pg_catalog.pg_stat_activity", "application_name = $3", "pgbox relay listener")
	pause(components[7], promoted, "finalized_at", "/* schema */river_job", "state = 'completed'")
	return out
}

func (l *load) setup(t *testing.T) {
	ctx := context.Background()
	_, err := l.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident.Quote(l.schema)+" CASCADE")
	require.NoError(t, err)
	require.NoError(t, migrations.Migrate(ctx, l.pool, migrations.Options{Schema: l.schema}))
	for _, q := range []string{
		"CREATE TABLE /* schema */orders (id int PRIMARY KEY)",
		// No unique keys: a second effect, email or charge would show.
		"CREATE TABLE /* schema */effects (order_id int NOT NULL, message_id text NOT NULL)",
		"CREATE TABLE /* schema */emails (order_id int NOT NULL, idempotency_key text NOT NULL)",
		"CREATE TABLE /* schema */charges (idempotency_key text NOT NULL)",
	} {
		_, err := l.pool.Exec(ctx, l.sql(q))
		require.NoError(t, err)
	}
}

// broker is a NATS JetStream stream of the run's own on the shared server.
type broker struct {
	publisher  message.Publisher
	subscriber message.Subscriber
	topic      string
}

func natsBroker(t *testing.T, topic string, slogger *slog.Logger) broker {
	url := natstest.URL(t)
	logger := watermill.NewSlogLogger(slogger)
	pub, err := jetstream.NewPublisher(jetstream.PublisherConfig{URL: url, Logger: logger})
	require.NoError(t, err)
	sub, err := jetstream.NewSubscriber(jetstream.SubscriberConfig{
		URL: url, Logger: logger, AckWaitTimeout: 5 * time.Second, ResourceInitializer: jetstream.GroupedConsumer(consumerName),
	})
	require.NoError(t, err)
	require.NoError(t, sub.SubscribeInitialize(topic))
	t.Cleanup(func() {
		_ = pub.Close()
		if t.Failed() {
			return // see startPipeline
		}
		_ = sub.Close()
		if nc, err := nats.Connect(url); err == nil {
			if js, err := natsjs.New(nc); err == nil {
				_ = js.DeleteStream(context.Background(), topic)
			}
			nc.Close()
		}
	})
	return broker{publisher: pub, subscriber: sub, topic: topic}
}

// startPipeline starts the relay, the consumer and the dispatcher, each
// stopped when the test ends.
func (l *load) startPipeline(t *testing.T, b broker) {
	ctx := context.Background()
	r, err := relay.New(l.pool, relay.Config{
		Lease:            lease,
		Logger:           l.logger,
		PollInterval:     100 * time.Millisecond,
		Publisher:        b.publisher,
		RetryBackoffFunc: func(int) time.Duration { return 50 * time.Millisecond },
		Schema:           l.schema,
	})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))

	in, err := inbox.New(l.pool, inbox.Config{Consumer: consumerName, Schema: l.schema})
	require.NoError(t, err)
	store := watermillinbox.Handler(watermillinbox.Config{Inbox: in, Logger: l.logger})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NewSlogLogger(l.logger))
	require.NoError(t, err)
	router.AddConsumerHandler("billing-inbox", b.topic, b.subscriber, store)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- router.Run(runCtx) }()
	// watermill-nats v2.1.3 closes a subscription's output channel when
	// the router stops, while a delivery may be on its way into it, and
	// then panics (send on closed channel): a failed test, with deliveries
	// still coming, would end in that panic and never say why it failed.
	// So a failed test leaves the router and its subscriber running (the
	// leak check runs only after passing tests); a passing one has none
	// coming, and its relay stops first.
	t.Cleanup(func() {
		if !t.Failed() {
			cancel()
			<-done
		}
	})
	t.Cleanup(func() { stop(t, r.Stop) })
	<-router.Running()

	d, err := dispatcher.New(l.pool, dispatcher.Config{
		HandlerTimeout:   lease / 2,
		Inbox:            in,
		Lease:            lease,
		Logger:           l.logger,
		PollInterval:     100 * time.Millisecond,
		RetryBackoffFunc: func(int) time.Duration { return 50 * time.Millisecond },
		Handlers: map[string]dispatcher.Handler{
			typeOrderPlaced: dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
				id, err := orderOf(m)
				if err != nil {
					return err
				}
				_, err = tx.Exec(ctx, l.sql("INSERT INTO /* schema */effects (order_id, message_id) VALUES ($1, $2)"), id, m.ID)
				return err
			}),
			typeEmailRequested: dispatcher.Leased(func(ctx context.Context, m *dispatcher.Message) error {
				id, err := orderOf(m)
				if err != nil {
					return err
				}
				// The outside call: committed on its own, before the done mark.
				// Its service (here the same database) being down is not
				// the message's fault: the handler says so, as a handler
				// calling a service that refuses connections would
				// (dispatcher.Unavailable gives the attempt back).
				_, err = l.pool.Exec(ctx, l.sql("INSERT INTO /* schema */emails (order_id, idempotency_key) VALUES ($1, $2)"), id, m.IdempotencyKey())
				if dberr.Cut(err) {
					return dispatcher.Unavailable(err)
				}
				return err
			}),
		},
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() {
		require.NoError(t, d.NotifyErr(), "the dispatcher's notifications arrive on the new primary")
		require.NoError(t, r.NotifyErr(), "the relay's notifications arrive on the new primary")
		select {
		case <-d.Stopped():
			t.Error("the dispatcher stopped by itself")
		case <-r.Stopped():
			t.Error("the relay stopped by itself")
		default:
		}
		stop(t, d.Stop)
	})
}

func (l *load) startMaintainer(t *testing.T) {
	m, err := maintenance.New(l.pool, maintenance.Config{
		Logger:         l.logger,
		PruneInterval:  maintenance.IntervalMin,
		ReplayInterval: -1,
		Schema:         l.schema,
	})
	require.NoError(t, err)
	require.NoError(t, m.Start(context.Background()))
	t.Cleanup(func() {
		require.True(t, m.Running(), "the maintainer stopped by itself")
		stop(t, m.Stop)
	})
}

// stop calls a component's Stop with a deadline.
func stop(t *testing.T, fn func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, fn(ctx))
}

// startHTTP serves a charge endpoint behind the idempotency middleware,
// whose effect commits with the stored response (WrapTx), and returns how
// to post to it.
func (l *load) startHTTP(t *testing.T) func(ctx context.Context, key string) (status int, replayed bool, err error) {
	idem, err := idempotency.New(l.pool, idempotency.Config{
		HandlerTimeout: 2 * time.Second,
		Lease:          3 * time.Second,
		Logger:         l.logger,
		RetryAfter:     100 * time.Millisecond,
		Schema:         l.schema,
	})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /charges", idem.WrapTx(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		if _, err := tx.Exec(r.Context(), l.sql("INSERT INTO /* schema */charges (idempotency_key) VALUES ($1)"), r.Header.Get("Idempotency-Key")); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return func(ctx context.Context, key string) (int, bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"cents":100}`))
		if err != nil {
			return 0, false, err
		}
		req.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			return 0, false, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header.Get(idempotency.ReplayedHeader) == "true", nil
	}
}

// request posts charges one after another, each retried with its key
// until it is answered 2xx, as a client of the endpoint would, until ctx
// ends.
func (l *load) request(ctx context.Context, post func(context.Context, string) (int, bool, error)) {
	for i := 1; ; i++ {
		key := fmt.Sprintf("charge-%d", i)
		for {
			status, _, err := post(ctx, key)
			if ctx.Err() != nil {
				return
			}
			if err == nil && status/100 == 2 {
				l.ok(components[8], time.Now())
				l.mu.Lock()
				l.answered = append(l.answered, key)
				l.mu.Unlock()
				l.charges.Add(1)
				break
			}
			l.mu.Lock()
			l.refused++
			l.mu.Unlock()
			time.Sleep(50 * time.Millisecond) // a client's retry delay
		}
	}
}

// produce places orders one after another until ctx ends: each order's row
// and its two messages in one transaction, tried again until it commits
// (an order already there committed on an earlier try whose answer was
// lost).
func (l *load) produce(ctx context.Context) {
	box, err := outbox.New(l.pool, outbox.Config{Schema: l.schema})
	if err != nil {
		panic(err)
	}
	for id := 1; ; id++ {
		for {
			err := l.place(ctx, box, id)
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				l.ok(components[0], time.Now())
				l.mu.Lock()
				l.acked = append(l.acked, id)
				l.mu.Unlock()
				l.orders.Add(1)
				break
			}
			time.Sleep(20 * time.Millisecond) // a service's retry delay
		}
		time.Sleep(5 * time.Millisecond) // a steady load, not a flood
	}
}

// orderMessages is the namespace of messageID's UUIDs.
var orderMessages = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/pgbox/pgbox/test/failover#order"))

// messageID is the id of order id's message of eventType: the same on every
// try of the order's transaction.
func messageID(id int, eventType string) uuid.UUID {
	return uuid.NewSHA1(orderMessages, []byte(fmt.Sprintf("%d/%s", id, eventType)))
}

func (l *load) place(ctx context.Context, box *outbox.Outbox, id int) error {
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	tag, err := tx.Exec(ctx, l.sql("INSERT INTO /* schema */orders (id) VALUES ($1) ON CONFLICT DO NOTHING"), id)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return nil // committed by an earlier try whose answer was lost
	}
	body, _ := json.Marshal(map[string]int{"order": id})
	// The messages' ids come from the order, as docs/operations.md
	// ("Failover") advises: a commit that other sessions of the old
	// primary saw (the relay, which published its messages) and that its
	// standby never got is lost with the old primary, and the retry writes
	// the order's messages again: under the same ids, the consumer dedupes
	// the two; under new ones, the order was handled twice (this test's
	// switchover, once in about twenty loaded runs).
	if _, err := box.Write(ctx, tx,
		outbox.Message{Topic: l.topic, EventType: typeOrderPlaced, ID: messageID(id, typeOrderPlaced), OrderingKey: fmt.Sprintf("customer-%d", id%17), Payload: body},
		outbox.Message{Topic: l.topic, EventType: typeEmailRequested, ID: messageID(id, typeEmailRequested), Payload: body},
	); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func orderOf(m *dispatcher.Message) (int, error) {
	var o struct {
		Order int `json:"order"`
	}
	if err := json.Unmarshal(m.Payload, &o); err != nil {
		return 0, dispatcher.Permanent(err)
	}
	return o.Order, nil
}

// count runs a count query, -1 while it fails.
func (l *load) count(q string, args ...any) int {
	var n int
	if err := l.pool.QueryRow(context.Background(), l.sql(q), args...).Scan(&n); err != nil {
		return -1
	}
	return n
}

// failure is a failure message made when it is printed.
type failure func() string

func (f failure) String() string { return f() }

// fileLogger is the run's logger, at level Warn: into a file, since a
// failover makes every component say what it retries, and the end of the
// file goes into the test's log if it fails.
func fileLogger(t *testing.T) *slog.Logger {
	path := filepath.Join(t.TempDir(), "pgbox.log")
	file, err := os.Create(path)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = file.Close()
		if !t.Failed() {
			return
		}
		b, _ := os.ReadFile(path)
		if len(b) == 0 {
			return
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("the end of the components' log (%d lines):\n%s", len(lines), strings.Join(lines[max(0, len(lines)-60):], "\n"))
	})
	return slog.New(slog.NewTextHandler(file, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// waitFor waits until cond holds, or fails the test naming what it waited
// for.
func (l *load) waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, timeout, 50*time.Millisecond, "timed out waiting for %s", what)
}
