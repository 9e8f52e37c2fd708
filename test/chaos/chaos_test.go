// Package chaos is pgbox's fault-injection suite. It runs the whole
// pipeline (producer processes writing orders and their messages, relay
// processes publishing them through NATS JetStream (or watermill-sql, with
// -chaos.broker=sql), consumer processes
// storing them in an inbox, flood processes redelivering them, dispatcher
// processes handling them) on a PostgreSQL cluster of its own, and meanwhile
// kills processes with SIGKILL, cuts every connection, restarts the server
// in immediate mode, SIGKILLs and restarts the NATS server and feeds in
// poison. At the end an independent checker
// counts, from the database alone, what was accepted and applied, and fails
// unless nothing was lost and no effect happened twice.
//
// `make test` runs it small; `make chaos` runs it with 100,000 messages and
// a 1,000,000-message backlog, and writes docs/reliability.md's figures.
package chaos

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/brokertest"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/migrations"
)

var (
	flagOrders    = flag.Int("chaos.orders", 800, "orders to produce (each makes two messages, plus poison)")
	flagProducers = flag.Int("chaos.producers", 2, "producer processes")
	flagKillEvery = flag.Duration("chaos.kill-every", 700*time.Millisecond, "how often a process is SIGKILLed")
	flagBacklog   = flag.Int("chaos.backlog", 20_000, "messages in the backlog-drain memory scenario")
	flagReport    = flag.String("chaos.report", "", "append the run's figures (markdown) to this file")
	flagSettle    = flag.Duration("chaos.settle", 3*time.Minute, "how long the run may take to settle after the faults")
	flagBroker    = flag.String("chaos.broker", "nats", "the broker between relays and consumers: nats (a NATS JetStream server of the run's own, SIGKILLed and restarted mid-run) or sql (watermill-sql on the run's PostgreSQL)")
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// natsDownFor is how long the NATS server stays killed: long enough for
// each relay to fail dozens of rounds, far more than relayMaxAttempts, so
// that an outage charged to the rows would kill them.
const natsDownFor = 5 * time.Second

func TestChaos(t *testing.T) {
	cl := startCluster(t)
	pool := cl.pool(t)
	setupSchemas(t, pool)

	f := newFleet(t, cl.url)
	defer f.logTailsIfFailed()
	var nats *brokertest.Server
	switch *flagBroker {
	case "nats":
		nats = brokertest.Start(t, brokertest.NATS)
		f.env = []string{"CHAOS_NATS_URL=" + nats.URL()}
		// The stream must exist before a relay publishes to it.
		sub, err := natsSubscriber(nats.URL())
		require.NoError(t, err)
		require.NoError(t, sub.(message.SubscribeInitializer).SubscribeInitialize(topic))
		require.NoError(t, sub.Close())
	case "sql":
	default:
		t.Fatalf("-chaos.broker=%q: use nats or sql", *flagBroker)
	}
	f.start("locker")
	for range 2 {
		f.start("relay")
		f.start("consumer")
		f.start("flood")
	}
	for range 3 {
		f.start("dispatcher")
	}
	orders, producers := *flagOrders, *flagProducers
	poisonEvery := max(orders/100, 10)
	var producing []*child
	for p := range producers {
		first, last := p*orders/producers+1, (p+1)*orders/producers
		producing = append(producing, f.start("producer",
			fmt.Sprintf("PRODUCER_FIRST=%d", first), fmt.Sprintf("PRODUCER_LAST=%d", last), fmt.Sprintf("CHAOS_POISON_EVERY=%d", poisonEvery)))
	}

	// Faults while the orders are produced: a SIGKILL every kill-every
	// (mostly dispatchers, sometimes a relay or a consumer), every pgbox
	// connection cut at 30%, the NATS server SIGKILLed at 45% and started
	// again natsDownFor later, the PostgreSQL server crash-restarted at 60%.
	// Every process not killed on this schedule must stay up throughout.
	f.phase = "producing"
	started := time.Now()
	var (
		terminated, restarted bool
		outages               []brokerOutage // the broker's, once over
		down                  *brokerOutage  // the one going on
	)
	lastKill := time.Now()
	for !allExited(producing) {
		time.Sleep(200 * time.Millisecond)
		f.requireAlive()
		// While NATS is down no process is killed or replaced: a new
		// consumer cannot say it is ready before the broker is back.
		if down == nil && time.Since(lastKill) >= *flagKillEvery {
			lastKill = time.Now()
			switch n := rand.N(10); {
			case n < 6:
				f.killOne("dispatcher")
			case n < 8:
				f.killOne("relay")
			default:
				f.killOne("consumer")
			}
		}
		if down == nil {
			f.replaceExited()
		}
		done := countOrders(pool)
		if !terminated && done >= orders*3/10 {
			terminateSessions(t, pool)
			terminated = true
			f.phase = "producing, after every pgbox connection was cut"
		}
		if nats != nil && len(outages) == 0 && down == nil && done >= orders*45/100 {
			down = &brokerOutage{from: time.Now(), relays: slices.Clone(f.byRole["relay"])}
			nats.Kill(t)
			f.phase = "producing, NATS down"
		}
		if down != nil && time.Since(down.from) >= natsDownFor {
			nats.Restart(t)
			down.to = time.Now()
			outages, down = append(outages, *down), nil
			f.phase = "producing, after NATS came back"
		}
		if !restarted && done >= orders*6/10 {
			cl.crashRestart(t)
			restarted = true
			f.phase = "producing, after the PostgreSQL crash-restart"
		}
	}
	for _, p := range producing {
		if err := p.Wait(context.Background()); err != nil {
			require.NoError(t, err, "%s failed; it printed:\n%s\n%s", p.name, p.printed(), p.tail())
		}
	}
	if down != nil { // the producers finished within the outage
		nats.Restart(t)
		down.to = time.Now()
		outages, down = append(outages, *down), nil
	}
	require.True(t, terminated && restarted, "the run was too short for the planned faults")
	produced := time.Since(started)

	// Let the floods go on a little, then wait for everything to settle,
	// replacing consumers that the restart took down.
	f.phase = "settling"
	time.Sleep(2 * time.Second)
	f.killAll("flood")
	deadline := time.Now().Add(*flagSettle)
	for !settled(t, pool) {
		require.Zero(t, deadOutboxRows(pool), "outbox rows are dead: the relays spent their %d attempts (a broker outage must spend none)", relayMaxAttempts)
		require.True(t, time.Now().Before(deadline), "the run did not settle within %s:\n%s", *flagSettle, unsettled(t, pool))
		f.requireAlive()
		f.replaceExited()
		time.Sleep(200 * time.Millisecond)
	}
	f.phase = "settled"
	f.requireAlive()

	r := check(t, pool)
	for _, o := range outages {
		for _, c := range o.relays {
			r.outageRelays++
			if reportedOutage(t, c, o) {
				r.relaysSawOutage++
			} else {
				r.silentRelays = append(r.silentRelays, c.name)
				r.silentLogs += silentRelay(t, c, o)
			}
		}
	}
	r.outages = len(outages)
	r.outageCharged, r.chargedList, r.charged = chargedDuringOutages(t, pool, outages)
	r.faults = fmt.Sprintf("%d dispatcher, %d relay and %d consumer processes SIGKILLed; every pgbox connection cut once (pg_terminate_backend); the server crash-restarted once (pg_ctl restart -m immediate)",
		f.kills["dispatcher"], f.kills["relay"], f.kills["consumer"])
	for _, o := range outages {
		r.faults += fmt.Sprintf("; the NATS JetStream server SIGKILLed and restarted %s later", o.to.Sub(o.from).Round(100*time.Millisecond))
	}
	r.duration = fmt.Sprintf("%s producing, %s in all", produced.Round(time.Second), time.Since(started).Round(time.Second))
	report := r.markdown(orders)
	fmt.Println(report)
	if *flagReport != "" {
		appendReport(t, *flagReport, report)
	}
	r.assert(t)
}

// countOrders counts committed orders, 0 while the server is down.
func countOrders(pool *pgxpool.Pool) int {
	var n int
	_ = pool.QueryRow(context.Background(), ident.Render("SELECT count(*) FROM /* schema */orders", producerSchema)).Scan(&n)
	return n
}

// terminateSessions cuts every connection of the run's processes: the
// engine must reconnect by itself.
func terminateSessions(t *testing.T, pool *pgxpool.Pool) {
	var n int
	err := pool.QueryRow(context.Background(), `
		SELECT count(pg_terminate_backend(pid)) FROM pg_catalog.pg_stat_activity
		WHERE application_name LIKE 'chaos %' AND application_name <> 'chaos driver'
		   OR application_name LIKE 'pgbox %'`).Scan(&n)
	require.NoError(t, err)
	require.Positive(t, n)
}

// settled reports whether every committed message has been published,
// received and finished (done or dead).
func settled(t *testing.T, pool *pgxpool.Pool) bool {
	var busy bool
	err := pool.QueryRow(context.Background(), ident.Render(`
		SELECT EXISTS (SELECT 1 FROM `+ident.Quote(producerSchema)+`.outbox WHERE status IN ('pending', 'running'))
		    OR EXISTS (SELECT 1 FROM `+ident.Quote(producerSchema)+`.outbox AS o
		               WHERE NOT EXISTS (SELECT 1 FROM /* schema */inbox AS i WHERE i.consumer = $1 AND i.message_id = o.id::text))
		    OR EXISTS (SELECT 1 FROM /* schema */inbox WHERE status IN ('pending', 'running'))`, consumerSchema), consumerName).Scan(&busy)
	return err == nil && !busy
}

// deadOutboxRows counts the producer's dead outbox rows, 0 while the
// server is down: such a row is never published, so the run cannot settle.
func deadOutboxRows(pool *pgxpool.Pool) int {
	var n int
	_ = pool.QueryRow(context.Background(), ident.Render("SELECT count(*) FROM /* schema */outbox WHERE status = 'dead'", producerSchema)).Scan(&n)
	return n
}

// unsettled describes what keeps a run from settling.
func unsettled(t *testing.T, pool *pgxpool.Pool) string {
	q := strings.NewReplacer("{p}", ident.Quote(producerSchema), "{c}", ident.Quote(consumerSchema))
	var b strings.Builder
	for _, query := range []string{
		q.Replace(`SELECT 'outbox ' || status || ': ' || count(*) FROM {p}.outbox WHERE status IN ('pending', 'running') GROUP BY status`),
		q.Replace(`SELECT 'not in the inbox: ' || count(*) FROM {p}.outbox AS o WHERE NOT EXISTS (SELECT 1 FROM {c}.inbox AS i WHERE i.message_id = o.id::text)`),
		q.Replace(`SELECT format('broker rows %s, offsets %s, snapshot xmin %s', (SELECT count(*) FROM {p}."watermill_orders"),
		           (SELECT string_agg(consumer_group || ':' || offset_acked || '@' || last_processed_transaction_id, ', ') FROM {p}."watermill_offsets_orders"),
		           pg_snapshot_xmin(pg_current_snapshot()))`),
		q.Replace(`SELECT format('missing: offset %s..%s (%s rows), transactions %s..%s', min(w."offset"), max(w."offset"), count(*), min(w.transaction_id), max(w.transaction_id))
		           FROM {p}."watermill_orders" AS w WHERE NOT EXISTS (SELECT 1 FROM {c}.inbox AS i WHERE i.message_id = w.uuid)`),
		q.Replace(`SELECT format('missing not on the broker at all: %s', count(*)) FROM {p}.outbox AS o
		           WHERE NOT EXISTS (SELECT 1 FROM {p}."watermill_orders" AS w WHERE w.uuid = o.id::text)`),
		q.Replace(`SELECT format('sessions in a transaction: %s', string_agg(application_name || ' xid ' || backend_xid, ', '))
		           FROM pg_catalog.pg_stat_activity WHERE backend_xid IS NOT NULL`),
		q.Replace(`SELECT format('inbox %s %s attempts=%s due_in=%s key=%s err=%s', message_id, status, attempts, available_at - now(), ordering_key, left(last_error, 60))
		           FROM {c}.inbox WHERE status IN ('pending', 'running') ORDER BY seq LIMIT 20`),
	} {
		rows, err := pool.Query(context.Background(), query)
		if err != nil {
			fmt.Fprintf(&b, "%v\n", err)
			continue
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			fmt.Fprintf(&b, "%v\n", err)
		}
		for _, l := range lines {
			fmt.Fprintln(&b, l)
		}
	}
	return b.String()
}

func setupSchemas(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	for _, schema := range []string{producerSchema, consumerSchema} {
		_, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident.Quote(schema)+" CASCADE")
		require.NoError(t, err)
		require.NoError(t, migrations.Migrate(ctx, pool, migrations.Options{Schema: schema}))
	}
	for _, q := range []string{
		ident.Render("CREATE TABLE /* schema */orders (id int PRIMARY KEY, cents int NOT NULL)", producerSchema),
		// Effects have no unique key: a second one would show.
		ident.Render("CREATE TABLE /* schema */effects (order_id int NOT NULL, message_id text NOT NULL, attempt int, pid int)", consumerSchema),
		ident.Render("CREATE TABLE /* schema */emails (order_id int NOT NULL, idempotency_key text NOT NULL)", consumerSchema),
		ident.Render("CREATE TABLE /* schema */hot (id int PRIMARY KEY)", consumerSchema),
		ident.Render("INSERT INTO /* schema */hot VALUES (1)", consumerSchema),
	} {
		_, err := pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	// The relay needs the broker's table before it publishes.
	_, err := pool.Exec(ctx, ident.Render(`CREATE TABLE /* schema */"watermill_orders" (
		"offset" BIGSERIAL, "uuid" VARCHAR(36) NOT NULL, "created_at" TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
		"payload" BYTEA DEFAULT NULL, "metadata" JSON DEFAULT NULL, "transaction_id" xid8 NOT NULL,
		PRIMARY KEY ("transaction_id", "offset"))`, producerSchema))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, ident.Render(`CREATE TABLE /* schema */"watermill_offsets_orders" (
		consumer_group VARCHAR(255) NOT NULL, offset_acked BIGINT, last_processed_transaction_id xid8 NOT NULL,
		PRIMARY KEY (consumer_group))`, producerSchema))
	require.NoError(t, err)
}

func appendReport(t *testing.T, path, report string) {
	file, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	defer file.Close()
	_, err = file.WriteString(strings.TrimSpace(report) + "\n\n")
	require.NoError(t, err)
}
