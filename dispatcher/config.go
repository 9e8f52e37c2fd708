package dispatcher

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/backoff"
	"github.com/pgbox/pgbox/internal/workloop"
)

const (
	// BatchSizeDefault is the default Config.BatchSize. A batch's
	// in-transaction messages share one transaction with a savepoint each;
	// past 64 written savepoints PostgreSQL's subtransaction cache overflows
	// and every session's snapshots get slower, so keep batches below that.
	BatchSizeDefault = 32
	// HandlerTimeoutDefault is the default Config.HandlerTimeout.
	HandlerTimeoutDefault = time.Minute
	// PollIntervalDefault is the default Config.PollInterval.
	PollIntervalDefault = time.Second
	// PollIntervalMin is the shortest Config.PollInterval allowed.
	PollIntervalMin = time.Millisecond
	// WorkersDefault is the default Config.Workers.
	WorkersDefault = 4
)

// Config configures a Dispatcher.
type Config struct {
	// BatchSize is the most messages a worker claims at once. Larger
	// batches spread a batch's fixed costs (its round trips and its
	// commit's WAL flush) over more messages: a few workers taking batches
	// of 100 to 400 drain a backlog fastest (docs/benchmarks.md). But an
	// in-transaction batch holds its rows locked until all of it is handled,
	// and a handler that breaks the connection makes its neighbours run
	// again. Defaults to BatchSizeDefault (32).
	BatchSize int

	// HandlerTimeout bounds each handler call: its context ends after this
	// long and the attempt counts as failed. Defaults to
	// HandlerTimeoutDefault (one minute).
	HandlerTimeout time.Duration

	// Handlers maps event types to their handlers. A message of a type with
	// no handler fails like a handler error (and ends dead if no handler is
	// added before its attempts run out). Required.
	Handlers map[string]Handler

	// Inbox is the inbox whose messages this dispatcher handles: the
	// dispatcher works for its consumer, in its schema, and wakes on its
	// notifications. Required.
	Inbox *inbox.Inbox

	// Lease is how long a claim is reserved for its worker. If the worker
	// has not finished by then (it crashed, was killed, stalled or was cut
	// off), another worker may claim the message, and the lost attempt
	// counts. Leases of messages waiting their turn in a batch are renewed
	// while their worker lives, and a leased handler's lease is renewed just
	// before it runs; a batch transaction left idle for a lease is ended by
	// the server. It is also how long a crashed worker's messages wait before
	// they are retried. Must exceed HandlerTimeout. Defaults to
	// HandlerTimeout plus one minute.
	Lease time.Duration

	// ListenConnConfig is how the dispatcher connects to LISTEN for new
	// messages: one connection of its own, outside the pool. Set it to a
	// direct connection to the database (pgx.ParseConfig of its URL) when
	// the pool goes through a transaction-pooling PgBouncer, where LISTEN
	// succeeds and then hears nothing. Defaults to the pool's connection
	// configuration. Not allowed with PollOnly.
	ListenConnConfig *pgx.ConnConfig

	// Logger receives the dispatcher's logs: handler failures, operators'
	// pauses and notifications that do not arrive at warn, dead messages,
	// dependencies a handler reports unavailable and database trouble at
	// error, the end of a pause or an outage at info. Defaults to
	// slog.Default().
	Logger *slog.Logger

	// MeterProvider receives the dispatcher's metrics (processed, failed,
	// dead, handler duration, the paused and unavailable gauges, and the
	// consumer's backlog gauges; see docs/operations.md). Defaults to
	// OpenTelemetry's global provider, which does nothing until one is
	// installed.
	MeterProvider metric.MeterProvider

	// PollInterval is how often an idle worker looks for due work when no
	// notification wakes it. Notifications make new messages start at once;
	// polling finds retries whose backoff has passed, expired leases, and
	// anything a lost notification missed. Defaults to PollIntervalDefault
	// (one second).
	PollInterval time.Duration

	// PollOnly makes the dispatcher open no LISTEN connection and find new
	// messages by polling alone, every PollInterval: for a deployment where
	// no connection can LISTEN (every route to the database goes through a
	// transaction pooler). Without it the dispatcher listens, checks once
	// connected that a notification sent through the pool comes back, and
	// says so (a warning, Dispatcher.NotifyErr, the health check) when none
	// does. Defaults to false.
	PollOnly bool

	// ProcessHeartbeat is how often the dispatcher touches its row in the
	// schema's processes table (inboxctl processes) while it runs: one
	// small write per interval. A dispatcher not seen for
	// pgbox.ProcessDeadAfter (3) heartbeats shows as dead. Defaults to
	// pgbox.ProcessHeartbeatDefault (10 seconds); at least
	// pgbox.ProcessHeartbeatMin.
	ProcessHeartbeat time.Duration

	// ProcessName names this dispatcher in the processes table: a pod
	// name, say. Defaults to the host name and process id ("host:4242").
	ProcessName string

	// Propagator reads the trace context the producer left in a message's
	// metadata (through the outbox, the broker and the inbox) into the
	// handler's context, so the handler continues the producer's trace.
	// Defaults to W3C Trace Context (traceparent, tracestate).
	Propagator propagation.TextMapPropagator

	// RetryBackoffFunc returns how long to wait before retrying a message
	// whose attempt number attempt failed. Defaults to DefaultRetryBackoff.
	RetryBackoffFunc func(attempt int) time.Duration

	// StallTimeout is how long messages may wait, claimable, with none
	// finished (done, retried after a failure, dead or snoozed) before the
	// dispatcher reports itself stalled, whatever the cause: an error log
	// naming what it waits on (outcomes it cannot record, claims that fail,
	// workers held by handlers that do not return), StallErr, the
	// pgbox.stalled gauge, and a failing health check, until a message is
	// finished again or none waits. An idle dispatcher is never stalled.
	// Defaults to 30 seconds, 10 PollIntervals or the HandlerTimeout,
	// whichever is longest (one minute with the default HandlerTimeout);
	// -1 turns the watchdog off.
	StallTimeout time.Duration

	// TracerProvider receives a span per handler call, a child of the
	// trace context found in the message's metadata (see Propagator).
	// Defaults to OpenTelemetry's global provider, which does nothing until
	// one is installed.
	TracerProvider trace.TracerProvider

	// UnavailableBackoffFunc returns how long a dispatcher whose handler
	// returned Unavailable leaves the message's event type alone before its
	// probe number probe (1 for the first): one message of the type is
	// claimed and its handler called, and the type is claimed at full speed
	// again if that returns anything but Unavailable. Defaults to
	// DefaultUnavailableBackoff (1s doubling to 30s).
	UnavailableBackoffFunc func(probe int) time.Duration

	// Workers is how many batches are handled at once. Each worker holds
	// one connection of the pool while it handles a batch, so the pool needs
	// more connections than Workers if handlers also use the pool (rather
	// than the transaction they are given) or if the service shares it.
	// Besides, the dispatcher opens up to Workers connections of its own
	// (a pool made with the same configuration) to record claims, and one
	// to LISTEN (none with PollOnly): count them in the server's
	// max_connections. Defaults to
	// WorkersDefault (4).
	Workers int
}

// WithDefaults returns a copy of c with every unset field given its default.
func (c Config) WithDefaults() Config {
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.HandlerTimeout = cmp.Or(c.HandlerTimeout, HandlerTimeoutDefault)
	c.Lease = cmp.Or(c.Lease, c.HandlerTimeout+time.Minute)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.ProcessHeartbeat = cmp.Or(c.ProcessHeartbeat, pgbox.ProcessHeartbeatDefault)
	if c.Propagator == nil {
		c.Propagator = propagation.TraceContext{}
	}
	if c.RetryBackoffFunc == nil {
		c.RetryBackoffFunc = DefaultRetryBackoff
	}
	// A handler may take its HandlerTimeout without stalling anything.
	c.StallTimeout = cmp.Or(c.StallTimeout, max(workloop.StallTimeoutFor(c.PollInterval), c.HandlerTimeout))
	if c.UnavailableBackoffFunc == nil {
		c.UnavailableBackoffFunc = DefaultUnavailableBackoff
	}
	c.Workers = cmp.Or(c.Workers, WorkersDefault)
	return c
}

func (c Config) validate() error {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	if c.Inbox == nil {
		add("Config.Inbox is nil: pass the inbox whose messages to handle, as made by inbox.New(pool, inbox.Config{Consumer: \"payments\"})")
	}
	if len(c.Handlers) == 0 {
		add("Config.Handlers is empty: map each event type to dispatcher.InTx(...) or dispatcher.Leased(...)")
	}
	types := make([]string, 0, len(c.Handlers))
	for t := range c.Handlers {
		types = append(types, t)
	}
	sort.Strings(types)
	for _, t := range types {
		if !c.Handlers[t].valid() {
			add("Config.Handlers[%q] is empty: build it with dispatcher.InTx or dispatcher.Leased", t)
		}
	}
	if c.BatchSize < 1 {
		add("Config.BatchSize is %d: it must be at least 1", c.BatchSize)
	}
	if c.Workers < 1 {
		add("Config.Workers is %d: it must be at least 1", c.Workers)
	}
	if c.HandlerTimeout < 0 {
		add("Config.HandlerTimeout is %s: it must be positive", c.HandlerTimeout)
	}
	if c.Lease <= c.HandlerTimeout {
		add("Config.Lease (%s) must exceed Config.HandlerTimeout (%s), or a slow handler could still run when another worker takes its message", c.Lease, c.HandlerTimeout)
	}
	if c.PollOnly && c.ListenConnConfig != nil {
		add("Config.PollOnly and Config.ListenConnConfig are both set: a poll-only dispatcher opens no LISTEN connection; set one of them")
	}
	if c.PollInterval < PollIntervalMin {
		add("Config.PollInterval is %s: it must be at least %s", c.PollInterval, PollIntervalMin)
	}
	if c.ProcessHeartbeat < pgbox.ProcessHeartbeatMin {
		add("Config.ProcessHeartbeat is %s: it must be at least %s", c.ProcessHeartbeat, pgbox.ProcessHeartbeatMin)
	}
	if c.StallTimeout < time.Millisecond && c.StallTimeout != -1 {
		add("Config.StallTimeout is %s: use at least 1ms, 0 for the default or -1 to turn the watchdog off", c.StallTimeout)
	}
	if len(problems) > 0 {
		return errors.New("dispatcher: " + strings.Join(problems, "; "))
	}
	return nil
}

// DefaultRetryBackoff waits about a second after the first failure and
// doubles the wait after each further one, up to an hour: 1s, 2s, 4s … 1h.
// Each wait is drawn from its upper half at random (between 50% and 100% of
// the nominal wait), so messages that failed together do not all come back
// at the same instant.
func DefaultRetryBackoff(attempt int) time.Duration {
	return backoff.Exponential(attempt, time.Second, time.Hour)
}
