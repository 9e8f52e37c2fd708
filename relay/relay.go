package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/backoff"
	"github.com/pgbox/pgbox/internal/claimrec"
	"github.com/pgbox/pgbox/internal/frontier"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/liveness"
	"github.com/pgbox/pgbox/internal/telemetry"
	"github.com/pgbox/pgbox/internal/workloop"
)

const (
	// BatchSizeDefault is the default Config.BatchSize.
	BatchSizeDefault = 100
	// LeaseDefault is the default Config.Lease.
	LeaseDefault = time.Minute
	// PollIntervalDefault is the default Config.PollInterval.
	PollIntervalDefault = time.Second
	// WorkersDefault is the default Config.Workers.
	WorkersDefault = 2
)

// Config configures a Relay.
type Config struct {
	// AtomicPublisher declares that Publisher takes all the messages of a
	// Publish call or none of them, as watermill-sql's does (one INSERT
	// statement), and Watermill's GoChannel (its Publish fails only once
	// it is closed, before it sends anything): the relay then publishes
	// each topic's rows of a batch in one call, and after a call the broker
	// refused it publishes them again one per call, so that the message
	// refused fails alone. Leave it false for any other publisher: the
	// relay then publishes one message per call, the only way to learn
	// which messages went out when a call fails, since publishers that
	// send message by message (NATS JetStream, RabbitMQ, Kafka) stop at
	// the first failure with the earlier messages sent. Set wrongly, a failed call's
	// messages that did go out are published again, which consumers
	// dedupe. It does not apply to a ResultPublisher, whose calls carry a
	// topic's rows of a batch anyway, nor to a TxPublisher. Defaults to
	// false.
	AtomicPublisher bool

	// BatchSize is the most rows a worker claims and publishes at once.
	// Defaults to BatchSizeDefault (100).
	BatchSize int

	// Lease bounds a batch: the relay claims rows in a transaction that it
	// holds open while it publishes them and records their outcomes, and
	// starts no publish that could end later than three quarters into the
	// lease. A relay that stalls with a batch open (its transaction idle for
	// a lease) is ended by the server, and another relay publishes the rows
	// again, as it does at once when the relay dies: consumers dedupe on
	// their ids. Defaults to LeaseDefault (one minute).
	Lease time.Duration

	// ListenConnConfig is how the relay connects to LISTEN for new rows:
	// one connection of its own, outside the pool. Set it to a direct
	// connection to the database (pgx.ParseConfig of its URL) when the
	// pool goes through a transaction-pooling PgBouncer, where LISTEN
	// succeeds and then hears nothing. Defaults to the pool's connection
	// configuration. Not allowed with PollOnly.
	ListenConnConfig *pgx.ConnConfig

	// Logger receives publish failures and notifications that do not
	// arrive at warn, dead rows and database trouble at error. Defaults to
	// slog.Default().
	Logger *slog.Logger

	// MaxAttempts, when positive, marks a row dead after that many failed
	// publishes, for an operator to retry (`inboxctl outbox retry`). A
	// broker outage spends no attempt (see UnreachableFunc). Zero, the
	// default, retries for ever.
	MaxAttempts int

	// MeterProvider receives the relay's metrics (messages published,
	// publish failures, and the outbox backlog and lag gauges; see
	// docs/operations.md). Defaults to OpenTelemetry's global provider,
	// which does nothing until one is installed.
	MeterProvider metric.MeterProvider

	// OutageBackoffFunc returns how long a relay that found its broker
	// unreachable waits before its probe number probe (1 for the first):
	// one worker publishes one batch, and the relay resumes if the broker
	// takes it. Defaults to DefaultOutageBackoff (1s doubling to 30s).
	OutageBackoffFunc func(probe int) time.Duration

	// PublishTimeout is how long the relay waits for one Publish call:
	// Watermill's Publish takes no context, so a call that hangs cannot be
	// cancelled, only abandoned. After PublishTimeout the relay stops
	// waiting and counts the call's messages as not published, whatever
	// the call does later, and judges the hang as it judges an unreachable
	// broker (see UnreachableFunc): an outage if nothing else of the round
	// reached the broker, charged only if the broker then proves
	// reachable. Until the call returns, the relay makes no new call to its
	// topic: the topic's rows wait, uncharged, and the other topics go on;
	// a topic that hangs for three PublishTimeouts is logged at error and
	// named in BrokerErr until it answers. A hung call's goroutine ends
	// when Publish returns; there are at most Workers of them per topic,
	// and Stop waits for them up to its deadline. Defaults to half the
	// Lease (30 seconds with the default Lease); at most half the Lease, so
	// that a hung publish is given up, and recorded, well before the lease
	// lets another relay publish its rows again.
	PublishTimeout time.Duration

	// PollInterval is how often an idle relay looks for rows when no
	// notification wakes it. Defaults to PollIntervalDefault (one second).
	PollInterval time.Duration

	// PollOnly makes the relay open no LISTEN connection and find new rows
	// by polling alone, every PollInterval: for a deployment where no
	// connection can LISTEN (every route to the database goes through a
	// transaction pooler). Without it the relay listens, checks once
	// connected that a notification sent through the pool comes back, and
	// says so (a warning, Relay.NotifyErr, the health check) when none
	// does. Defaults to false.
	PollOnly bool

	// ProcessHeartbeat is how often the relay touches its row in the
	// schema's processes table (inboxctl processes) while it runs: one
	// small write per interval. A relay not seen for
	// pgbox.ProcessDeadAfter (3) heartbeats shows as dead. Defaults to
	// pgbox.ProcessHeartbeatDefault (10 seconds); at least
	// pgbox.ProcessHeartbeatMin.
	ProcessHeartbeat time.Duration

	// ProcessName names this relay in the processes table: a pod name,
	// say. Defaults to the host name and process id ("host:4242").
	ProcessName string

	// Propagator reads the trace context the producer left in a row's
	// metadata (outbox.Write puts it there) to make each publish span its
	// child, and writes the publish span's context into the published
	// message in its place. Defaults to W3C Trace Context (traceparent,
	// tracestate), as outbox.Config.Propagator does.
	Propagator propagation.TextMapPropagator

	// Publisher is where rows are published: any Watermill publisher
	// (watermill-sql, through package watermillsql, a TxPublisher, or
	// watermill-sql's own with AtomicPublisher; NATS JetStream, through
	// package natsjs, a ResultPublisher, for a batch per call; RabbitMQ
	// through package rabbitmq; Redis Streams through package redisstream;
	// Kafka with package kafka's marshaler).
	// Required.
	Publisher message.Publisher

	// RetryBackoffFunc returns how long to wait before publishing a row
	// again after its attempt number attempt failed. Defaults to
	// DefaultRetryBackoff.
	RetryBackoffFunc func(attempt int) time.Duration

	// Schema is the PostgreSQL schema holding pgbox's tables. Defaults to
	// pgbox.DefaultSchema.
	Schema string

	// StallTimeout is how long rows may wait, publishable, with none
	// published (or failed and charged) before the relay reports itself
	// stalled, whatever the cause: an error log saying what it waits on (a
	// broker outage, a topic that hangs, outcomes it cannot record, claims
	// that fail), StallErr, the pgbox.stalled gauge, and a failing health
	// check, until a row is finished again or none waits. An idle relay is
	// never stalled. Defaults to 30 seconds or 10 PollIntervals, whichever
	// is longer; -1 turns the watchdog off.
	StallTimeout time.Duration

	// TracerProvider receives a span per published message, a child of the
	// producer's trace and the parent of the consumer's. Defaults to
	// OpenTelemetry's global provider, which does nothing until one is
	// installed.
	TracerProvider trace.TracerProvider

	// UnreachableFunc reports whether a publish error means that the broker
	// could not be reached, rather than that it refused the messages. A
	// round in which no publish reached the broker, because one failed so
	// (or hung, see PublishTimeout), is an outage: its rows go back to
	// pending with their attempt refunded, the whole relay pauses
	// (Config.OutageBackoffFunc, BrokerErr, the health check, the
	// pgbox.relay.broker_unreachable gauge) and logs once per change. A
	// publish that fails so, or hangs, after others of its round reached
	// the broker leaves the relay in doubt: its rows go back uncharged and
	// the next round probes the broker at once. If the probe reaches
	// nothing, the broker went away mid-round: an outage, and the rows stay
	// uncharged. If it answers, the failure was the rows' own (a message
	// that breaks the connection, say) and they are charged an attempt, as
	// any failure is. A probe of a broker that was down which reaches it
	// with some calls and not others ends the outage, and their rows go
	// back uncharged, not in doubt: the broker was coming back. So an
	// outage of any length, however it begins or ends, charges no row,
	// and a row that fails alone still reaches MaxAttempts.
	// Defaults to IsUnreachable; wrap a publisher's own connection errors
	// in ErrBrokerUnreachable, or give a function that knows them.
	UnreachableFunc func(err error) bool

	// Workers is how many batches are published at once. Each holds a
	// connection of the pool for its length, and records its claim through
	// a small pool the relay opens for that (at most Workers connections,
	// each held while its batch is published).
	// Defaults to WorkersDefault (2).
	Workers int
}

// DefaultRetryBackoff waits about a second after the first failed publish
// and doubles the wait after each further one, up to a minute, with jitter:
// a broker that comes back is used again within a minute.
func DefaultRetryBackoff(attempt int) time.Duration {
	return backoff.Exponential(attempt, time.Second, time.Minute)
}

// WithDefaults returns a copy of c with every unset field given its default.
func (c Config) WithDefaults() Config {
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.Lease = cmp.Or(c.Lease, LeaseDefault)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, c.Lease/2)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.ProcessHeartbeat = cmp.Or(c.ProcessHeartbeat, pgbox.ProcessHeartbeatDefault)
	if c.Propagator == nil {
		c.Propagator = propagation.TraceContext{}
	}
	if c.OutageBackoffFunc == nil {
		c.OutageBackoffFunc = DefaultOutageBackoff
	}
	if c.RetryBackoffFunc == nil {
		c.RetryBackoffFunc = DefaultRetryBackoff
	}
	c.Schema = cmp.Or(c.Schema, pgbox.DefaultSchema)
	c.StallTimeout = cmp.Or(c.StallTimeout, workloop.StallTimeoutFor(c.PollInterval))
	if c.UnreachableFunc == nil {
		c.UnreachableFunc = IsUnreachable
	}
	c.Workers = cmp.Or(c.Workers, WorkersDefault)
	return c
}

func (c Config) validate() error {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if c.Publisher == nil {
		add("Config.Publisher is nil: give the Watermill publisher to publish through")
	}
	if c.BatchSize < 1 {
		add("Config.BatchSize is %d: it must be at least 1", c.BatchSize)
	}
	if c.Workers < 1 {
		add("Config.Workers is %d: it must be at least 1", c.Workers)
	}
	if c.Lease < time.Millisecond {
		add("Config.Lease is %s: it must be at least 1ms", c.Lease)
	}
	if c.PublishTimeout <= 0 || c.PublishTimeout > c.Lease/2 {
		add("Config.PublishTimeout is %s: it must be positive and at most half the Lease (%s), so that a hung publish is given up, and recorded, before the lease lets another relay publish its rows again",
			c.PublishTimeout, c.Lease/2)
	}
	if c.MaxAttempts < 0 {
		add("Config.MaxAttempts is %d: use 0 to retry for ever or a positive number", c.MaxAttempts)
	}
	if c.PollOnly && c.ListenConnConfig != nil {
		add("Config.PollOnly and Config.ListenConnConfig are both set: a poll-only relay opens no LISTEN connection; set one of them")
	}
	if c.PollInterval < time.Millisecond {
		add("Config.PollInterval is %s: it must be at least 1ms", c.PollInterval)
	}
	if c.StallTimeout < time.Millisecond && c.StallTimeout != -1 {
		add("Config.StallTimeout is %s: use at least 1ms, 0 for the default or -1 to turn the watchdog off", c.StallTimeout)
	}
	if c.ProcessHeartbeat < pgbox.ProcessHeartbeatMin {
		add("Config.ProcessHeartbeat is %s: it must be at least %s", c.ProcessHeartbeat, pgbox.ProcessHeartbeatMin)
	}
	if err := ident.ValidateSchema(c.Schema); err != nil {
		add("Config.Schema: %v", err)
	}
	if len(problems) > 0 {
		return errors.New("relay: " + strings.Join(problems, "; "))
	}
	return nil
}

// Relay publishes committed outbox rows. Several relays, in one process or
// many, may run against the same schema.
type Relay struct {
	calls    *calls // the Publish calls, hung ones included
	cfg      Config
	frontier *frontier.Frontier // where claims start in the pending index
	gauges   telemetry.Registration
	held     claimrec.Held // batches whose claim record this process will settle itself
	loop     *workloop.Service
	outage   *outage
	pool     *pgxpool.Pool
	proc     *liveness.Process // its row in the processes table
	q        queries
	// records is a small pool of the relay's own for recording claims: a
	// worker records its claim while its batch transaction holds a
	// connection of the pool, which may have no other free.
	records *pgxpool.Pool
	// recordFirst is set while claim records fail: a batch then waits for
	// its record's answer before it publishes (runBatch).
	recordFirst atomic.Bool
	tel         *telemetry.Relay
}

type queries struct {
	begin                                                                        []string
	charge, claim, complete, due, openSince, reconcile, recordClaim, staleClaims string
}

// New returns a Relay. It checks the configuration but does not touch the
// database; Start does.
func New(pool *pgxpool.Pool, cfg Config) (*Relay, error) {
	if pool == nil {
		return nil, errors.New("relay: pool is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Relay{
		cfg:      cfg,
		frontier: frontier.New(frontier.Margin, frontier.FullEvery),
		pool:     pool,
		q: queries{
			begin:       []string{beginBatch[0], fmt.Sprintf(beginBatch[1], cfg.Lease.Milliseconds())},
			charge:      ident.Render(chargeSQL, cfg.Schema),
			claim:       ident.Render(claimSQL, cfg.Schema),
			complete:    ident.Render(completeSQL, cfg.Schema),
			due:         ident.Render(dueSQL, cfg.Schema),
			openSince:   fmt.Sprintf(openSinceSQL, cfg.Lease.Milliseconds()),
			reconcile:   ident.Render(reconcileSQL, cfg.Schema),
			recordClaim: ident.Render(recordClaimSQL, cfg.Schema),
			staleClaims: ident.Render(staleClaimsSQL, cfg.Schema),
		},
		tel: telemetry.NewRelay(cfg.MeterProvider, cfg.TracerProvider, cfg.Propagator),
	}
	r.proc = liveness.New(pool, liveness.Config{Heartbeat: cfg.ProcessHeartbeat, Kind: pgbox.ProcessRelay,
		Logger: cfg.Logger, Name: cfg.ProcessName, Schema: cfg.Schema})
	r.outage = newOutage(cfg.OutageBackoffFunc, cfg.Logger, r.tel)
	r.calls = newCalls(cfg.PublishTimeout, cfg.Logger, r.tel, func() bool { return r.outage.Err() != nil })
	r.loop = workloop.New(workloop.Config{
		Batch:      r.runBatch,
		BatchSize:  cfg.BatchSize,
		Channel:    ident.Channel(cfg.Schema, "outbox"),
		ConnConfig: cmp.Or(cfg.ListenConnConfig, pool.Config().ConnConfig),
		DueFunc: func(ctx context.Context) (int64, time.Duration, error) {
			return telemetry.ReadBacklog(ctx, pool, r.q.due, workloop.DueCountMax)
		},
		Logger:       cfg.Logger,
		Name:         "relay",
		Notifier:     pool,
		PollInterval: cfg.PollInterval,
		PollOnly:     cfg.PollOnly,
		StallTimeout: max(cfg.StallTimeout, 0),
		Telemetry:    telemetry.NewLoop(cfg.MeterProvider, telemetry.AttrComponent.String("relay")),
		WaitingOnFunc: func() []string {
			var causes []string
			if err := r.BrokerErr(); err != nil {
				causes = append(causes, err.Error())
			}
			return causes
		},
		Workers: cfg.Workers,
	})
	return r, nil
}

// Start checks that the database is reachable and the schema migrated,
// registers the relay in the processes table (see Config.ProcessHeartbeat;
// a failure there is logged, never fatal), then starts publishing and
// returns. ctx bounds only the start-up checks.
func (r *Relay) Start(ctx context.Context) error {
	return r.loop.Start(ctx, func(ctx context.Context) error {
		if err := pgbox.CheckSchema(ctx, r.pool, r.cfg.Schema); err != nil {
			return fmt.Errorf("relay: %w", err)
		}
		cfg := r.pool.Config() // a copy
		cfg.MaxConns, cfg.MinConns = int32(r.cfg.Workers), 0
		records, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("relay: open the claim-recording pool: %w", err)
		}
		r.records = records
		r.gauges.Watch(func() func() { return r.tel.WatchLag(r.pool, r.cfg.Schema) })
		r.proc.Start(ctx) // last: nothing after it can fail Start
		return nil
	})
}

// Stop stops claiming rows and waits for the batches being published, each
// Publish call up to Config.PublishTimeout. If ctx ends first, it stops
// waiting: the rows of the calls under way, and the rows claimed but not
// yet handed to the publisher, go back to pending at once, with their
// attempt refunded (a call that does deliver later causes a duplicate,
// which consumers dedupe). Then it removes the relay's row from the
// processes table, and waits, until ctx ends, for the Publish calls it
// stopped waiting for to return: a Watermill Publish cannot be cancelled,
// so a call's goroutine lives until the publisher returns. If some are
// still out when ctx ends, Stop says how many in its error; closing the
// publisher makes most publishers return.
// Stop may be called more than once, and before Start.
func (r *Relay) Stop(ctx context.Context) error {
	defer r.gauges.Unwatch()
	err := r.loop.Stop(ctx)
	if r.records != nil {
		r.records.Close()
	}
	r.proc.Stop(ctx) // after the work: a stopped relay holds no batch
	defer r.calls.close()
	if hung := r.calls.wait(ctx); hung > 0 {
		err = errors.Join(err, fmt.Errorf("relay: stopped, but %d Publish calls that got no answer are still running (closing the publisher ends them, for most publishers): %w",
			hung, context.Cause(ctx)))
	}
	return err
}

// Stopped returns a channel closed when Stop has finished.
func (r *Relay) Stopped() <-chan struct{} { return r.loop.Stopped() }
