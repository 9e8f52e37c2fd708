package bench

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/proccpu"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
	"github.com/pgbox/pgbox/watermillinbox"
)

// e2eStages are the end-to-end case's stages that work the database, each
// on a pool of its own (named by its application_name), in the order a
// message passes them. The broker stage is watermill-sql's subscriber; it
// has no pool with another broker.
var e2eStages = []string{"producers", "relay", "broker", "inbox", "dispatcher"}

const (
	// e2eAhead bounds how many written messages wait to be handled in the
	// end-to-end cases: enough to keep every stage busy (the dispatcher
	// claims 4 × 200 at once, the relay 2 × 100), few enough that the
	// stages' queues cannot shift much work into or out of the timed
	// window, and that the wait for the last to be handled is short.
	e2eAhead = 2000
	// e2eStuck is how long an end-to-end case waits for another message
	// to be handled before it fails.
	e2eStuck = 30 * time.Second
)

// newSubscriber makes the Watermill subscriber an end-to-end case reads
// the broker with, on the broker stage's pool where it needs one, with how
// many subscriptions to read it by at once and what closes it.
type newSubscriber func(ctx context.Context, pool *pgxpool.Pool) (message.Subscriber, int, func(), error)

// e2eCase is the end-to-end case through a broker: the whole path, beside
// the plain-SQL ceilings of its two database stages (the relay's, to
// GoChannel, and the dispatcher's drain), so that the ratios are the
// shares of them it reaches. brokerOnDB says the broker keeps its
// messages in the database, as a stage with a pool of its own.
func (e *env) e2eCase(broker string, newPub newPublisher, newSub newSubscriber, brokerOnDB bool) benchCase {
	return benchCase{scenario: "end-to-end", setting: broker, main: "msgs/s", higherBetter: true, systems: []system{
		{"pgbox", e.endToEnd(newPub, newSub, brokerOnDB)},
		{"raw relay", e.rawRelay(e.cfg.Backlog/4, rawWatermill(goChannel))},
		{"raw drain", e.rawDrain(e.cfg.Backlog/4, e.cfg.Workers)},
	}}
}

// endToEnd runs the whole path at the rate it can hold: two producers
// write batches of 100 outbox rows, one transaction each, while fewer than
// e2eAhead written messages wait to be handled (with continuous, as
// dispatch-continuous stores them); the relay publishes them through the publisher newPub
// makes; the subscriber newSub makes stores them with watermillinbox,
// acking after its commit; the dispatcher's workers handle them with a
// no-op in-transaction handler. It reports the messages handled a second
// in the timed window, and the CPU each stage used per message over the
// whole run (stageCPU), once every message written was handled.
func (e *env) endToEnd(newPub newPublisher, newSub newSubscriber, brokerOnDB bool) runFunc {
	return func(ctx context.Context, s scale) (Figures, error) {
		r, err := e.newRig(ctx, 2) // the schema
		if err != nil {
			return nil, err
		}
		defer r.close()
		pools := map[string]*pgxpool.Pool{}
		for _, stage := range e2eStages {
			if stage == "broker" && !brokerOnDB {
				continue
			}
			pool, _, err := newPool(ctx, withAppName(e.cfg.URL, stage), int32(e.cfg.Workers+6))
			if err != nil {
				return nil, err
			}
			defer pool.Close()
			pools[stage] = pool
		}
		out, err := outbox.New(pools["producers"], outbox.Config{Schema: pgboxSchemaName})
		if err != nil {
			return nil, err
		}
		in, err := inbox.New(pools["inbox"], inbox.Config{Consumer: consumer, Schema: pgboxSchemaName})
		if err != nil {
			return nil, err
		}
		dispatchIn, err := inbox.New(pools["dispatcher"], inbox.Config{Consumer: consumer, Schema: pgboxSchemaName})
		if err != nil {
			return nil, err
		}
		var handled, produced atomic.Int64
		d, err := (&rig{pool: pools["dispatcher"], in: dispatchIn}).dispatcher(e, e.cfg.Workers, batchSize, counter(&handled))
		if err != nil {
			return nil, err
		}
		pub, closePub, err := newPub(ctx, pools["relay"])
		if err != nil {
			return nil, err
		}
		defer closePub()
		sub, subscriptions, closeSub, err := newSub(ctx, pools["broker"])
		if err != nil {
			return nil, err
		}
		defer closeSub()
		store := watermillinbox.Handler(watermillinbox.Config{Inbox: in, Logger: e.log})
		subCtx, stopSubs := context.WithCancel(ctx)
		defer stopSubs()
		for range subscriptions {
			msgs, err := sub.Subscribe(subCtx, "bench")
			if err != nil {
				return nil, err
			}
			go func() {
				for m := range msgs {
					if store(m) != nil {
						m.Nack()
						continue
					}
					m.Ack()
				}
			}()
		}
		rel, err := relay.New(pools["relay"], relay.Config{Schema: pgboxSchemaName, Publisher: pub, Logger: e.log, ListenConnConfig: e.listen, PollOnly: e.pollOnly})
		if err != nil {
			return nil, err
		}
		for _, svc := range []interface{ Start(context.Context) error }{d, rel} {
			if err := svc.Start(ctx); err != nil {
				return nil, err
			}
		}
		defer d.Stop(context.WithoutCancel(ctx))
		defer rel.Stop(context.WithoutCancel(ctx))
		before, err := stageCPU(ctx, pools)
		if err != nil {
			return nil, err
		}
		produce := func(ctx context.Context) error {
			for produced.Load()-handled.Load() > e2eAhead {
				if err := sleep(ctx, time.Millisecond); err != nil {
					return err
				}
			}
			msgs := make([]outbox.Message, 100)
			for i := range msgs {
				msgs[i] = outbox.Message{Topic: "bench", EventType: "noop", Payload: benchPayload}
			}
			if err := pgx.BeginFunc(ctx, pools["producers"], func(tx pgx.Tx) error {
				_, err := out.Write(ctx, tx, msgs...)
				return err
			}); err != nil {
				return err
			}
			produced.Add(int64(len(msgs)))
			return nil
		}
		n, elapsed, err := continuous(ctx, s.d(e.cfg.Duration), &handled, &produced, produce)
		if err != nil {
			return nil, err
		}
		// The CPU per message: of every message written, once each is
		// handled.
		// A smoke run's window can end before the first message got
		// through; its figures mean nothing.
		if n == 0 && !e.cfg.Smoke {
			err = fmt.Errorf("no message was handled in the timed %s", s.d(e.cfg.Duration))
		} else {
			err = waitHandled(ctx, &handled, produced.Load())
		}
		if err != nil {
			return nil, heldBack(ctx, r.pool, pools["broker"] != nil, err)
		}
		after, err := stageCPU(ctx, pools)
		if err != nil {
			return nil, err
		}
		f := Figures{"msgs/s": float64(n) / elapsed.Seconds()}
		for stage, t := range after {
			f["CPU µs/msg, "+stage] = float64((t - before[stage]).Microseconds()) / float64(produced.Load())
		}
		return f, nil
	}
}

// oldestTxSQL reads how long, in seconds, the oldest transaction in the
// whole server (any database's) has been open.
const oldestTxSQL = `SELECT coalesce(extract(epoch FROM now() - min(xact_start)), 0)::float8 FROM pg_stat_activity
WHERE backend_xid IS NOT NULL OR backend_xmin IS NOT NULL`

// heldBack adds to err, a stalled end-to-end run's, that watermill-sql's
// subscriber was held back by an old transaction, when brokerOnDB and one
// has been open for over a second (a stall's cause, as the case's own
// transactions take milliseconds).
func heldBack(ctx context.Context, pool *pgxpool.Pool, brokerOnDB bool, err error) error {
	var age float64
	if brokerOnDB && pool.QueryRow(ctx, oldestTxSQL).Scan(&age) == nil && age > 1 {
		return fmt.Errorf("%w: a transaction on the server has been open for %.0fs, and watermill-sql's subscribers read no "+
			"message written after it began until it ends: run the case when nothing else holds a transaction open", err, age)
	}
	return err
}

// waitHandled waits until handled reaches n, and fails when it stays put
// for e2eStuck.
func waitHandled(ctx context.Context, handled *atomic.Int64, n int64) error {
	last, since := handled.Load(), time.Now()
	for h := last; h < n; h = handled.Load() {
		if h != last {
			last, since = h, time.Now()
		}
		if time.Since(since) > e2eStuck {
			return fmt.Errorf("%d of the %d messages written were handled, and none more for %s", h, n, e2eStuck)
		}
		if err := sleep(ctx, time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// stageCPU returns the CPU time the bench's process has used ("process":
// every stage's Go side, the broker's client and an in-process broker
// included), and, when PostgreSQL runs on this machine, the CPU time of
// each stage's database backends ("db, relay" ...), as /proc shows them.
func stageCPU(ctx context.Context, pools map[string]*pgxpool.Pool) (map[string]time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return nil, fmt.Errorf("read the process's CPU time: %w", err)
	}
	cpu := map[string]time.Duration{"process": time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	db := map[string]time.Duration{}
	for i, stage := range e2eStages {
		pool, ok := pools[stage]
		if !ok {
			continue
		}
		rows, err := pool.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", pool.Config().ConnConfig.RuntimeParams["application_name"])
		if err != nil {
			return nil, err
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return nil, err
		}
		var t time.Duration
		for _, pid := range pids {
			used, local := proccpu.Postgres(int(pid))
			if !local {
				return cpu, nil // not on this machine: the process's CPU only
			}
			t += used
		}
		db[fmt.Sprintf("db, %d %s", i+1, stage)] = t
	}
	maps.Copy(cpu, db)
	return cpu, nil
}

// withAppName returns the database URL (a URL or key=value pairs) with its
// connections' application_name set to name.
func withAppName(dbURL, name string) string {
	u, err := url.Parse(dbURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return dbURL + " application_name=bench_" + name
	}
	q := u.Query()
	q.Set("application_name", "bench_"+name)
	u.RawQuery = q.Encode()
	return u.String()
}

// watermillSQLSubscriber reads watermill-sql's table on the broker stage's
// pool, one subscription of consumer group "bench" (the group's
// subscriptions take turns: each reads holding the group's offset row
// locked), polling every 10 ms when it finds nothing.
func watermillSQLSubscriber(ctx context.Context, pool *pgxpool.Pool) (message.Subscriber, int, func(), error) {
	offsets := wmsql.DefaultPostgreSQLOffsetsAdapter{
		GenerateMessagesOffsetsTableName: func(topic string) string {
			return ident.Quote(pgboxSchemaName) + "." + ident.Quote("watermill_offsets_"+topic)
		},
	}
	// The tables, made before the publisher's first publish: watermill-sql's
	// CREATE … IF NOT EXISTS collide when run at once.
	for _, q := range append(watermillSQLSchema.SchemaInitializingQueries("bench"), offsets.SchemaInitializingQueries("bench")...) {
		if _, err := pool.Exec(ctx, q.Query, q.Args...); err != nil {
			return nil, 0, nil, err
		}
	}
	db := stdlib.OpenDBFromPool(pool)
	sub, err := wmsql.NewSubscriber(db, wmsql.SubscriberConfig{ConsumerGroup: "bench", SchemaAdapter: watermillSQLSchema, OffsetsAdapter: offsets,
		PollInterval: 10 * time.Millisecond}, watermill.NopLogger{})
	if err != nil {
		_ = db.Close()
		return nil, 0, nil, err
	}
	return sub, 1, func() { _ = sub.Close(); _ = db.Close() }, nil
}

// natsSubscriber reads the NATS case's stream through watermill-nats's
// JetStream subscriber by 16 subscriptions to one durable consumer, which
// share its messages.
func natsSubscriber(natsURL string) newSubscriber {
	return func(context.Context, *pgxpool.Pool) (message.Subscriber, int, func(), error) {
		sub, err := wmnats.NewSubscriber(wmnats.SubscriberConfig{URL: natsURL, Logger: watermill.NopLogger{},
			ResourceInitializer: func(ctx context.Context, js natsjs.JetStream, _ string) (natsjs.Consumer, func(context.Context, watermill.LoggerAdapter), error) {
				c, err := js.CreateOrUpdateConsumer(ctx, "pgbox_bench", natsjs.ConsumerConfig{Durable: "bench", AckPolicy: natsjs.AckExplicitPolicy, MaxAckPending: 4096})
				return c, nil, err
			}})
		if err != nil {
			return nil, 0, nil, err
		}
		return sub, 16, func() { _ = sub.Close() }, nil
	}
}
