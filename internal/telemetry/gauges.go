package telemetry

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/tables"
)

// Querier is the part of a pgx pool the gauges need.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// gaugeTimeout bounds one gauge query, so a slow database cannot stall a
// metrics scrape for long.
const gaugeTimeout = 5 * time.Second

// inboxBacklogSQL reads consumer $1's backlog: its pending messages, and
// how long the oldest claimable one has waited since it became due. A
// message held behind a dead message of its ordering key, and one an
// operator paused (the consumer, or its event type, in consumer_pauses),
// is counted but not aged: it waits for an operator, not for a worker. It
// reads the consumer's pending rows through inbox_pending_idx, so it costs
// in proportion to the backlog, not to the table; the pauses are read
// once (the subqueries are uncorrelated).
const inboxBacklogSQL = `
SELECT count(*),
       coalesce(extract(epoch FROM now() - min(i.available_at) FILTER (
           WHERE i.available_at <= now() AND NOT ` + tables.InboxBehindDead + `
             AND i.event_type <> ALL (ARRAY(SELECT p.event_type FROM /* schema */consumer_pauses AS p WHERE p.consumer = $1))
             AND NOT EXISTS (SELECT 1 FROM /* schema */consumer_pauses AS p WHERE p.consumer = $1 AND p.event_type = ''))), 0)::float8
FROM /* schema */inbox AS i
WHERE i.consumer = $1 AND i.status = ` + tables.InboxPending

// outboxBacklogSQL reads the outbox's backlog: rows not yet published
// (pending or being published), and how long the oldest publishable one has
// waited since it became due, with the same exception for rows held behind
// a dead row of their key. Each status is read through its partial index
// (a list of statuses would read every published row the outbox keeps).
const outboxBacklogSQL = `
SELECT (SELECT count(*) FROM /* schema */outbox AS o WHERE o.status = ` + tables.OutboxRunning + `) + count(*),
       coalesce(extract(epoch FROM now() - min(o.available_at) FILTER (
           WHERE o.available_at <= now() AND NOT ` + tables.OutboxBehindDead + `)), 0)::float8
FROM /* schema */outbox AS o
WHERE o.status = ` + tables.OutboxPending

func render(query, schema string) string { return ident.Render(query, schema) }

// queryBacklog runs a backlog query: how many rows wait, and the oldest's
// wait in seconds.
func queryBacklog(ctx context.Context, db Querier, query string, args ...any) (n int64, age float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, gaugeTimeout)
	defer cancel()
	err = db.QueryRow(ctx, query, args...).Scan(&n, &age)
	return n, age, err
}

// ReadInboxBacklog reads consumer's backlog from db: how many messages are
// pending, and how long the oldest claimable one has waited since it became
// due. The health check uses it too.
func ReadInboxBacklog(ctx context.Context, db Querier, schema, consumer string) (int64, time.Duration, error) {
	return ReadBacklog(ctx, db, render(inboxBacklogSQL, schema), consumer)
}

// ReadOutboxBacklog reads the outbox's backlog from db, like ReadInboxBacklog.
func ReadOutboxBacklog(ctx context.Context, db Querier, schema string) (int64, time.Duration, error) {
	return ReadBacklog(ctx, db, render(outboxBacklogSQL, schema))
}

// ReadBacklog runs query, a backlog query that returns a count and an age
// in seconds (as the stall watchdogs' queries do too), on db.
func ReadBacklog(ctx context.Context, db Querier, query string, args ...any) (int64, time.Duration, error) {
	n, age, err := queryBacklog(ctx, db, query, args...)
	return n, time.Duration(age * float64(time.Second)), err
}

// unregister turns a callback registration into a stop function.
func unregister(reg metric.Registration, err error) func() {
	if err != nil {
		otel.Handle(err)
		return func() {}
	}
	return func() {
		if err := reg.Unregister(); err != nil {
			otel.Handle(err)
		}
	}
}

// Registration holds a component's observable gauges from Start to Stop.
// The zero value is ready; it is safe for concurrent use.
type Registration struct {
	mu   sync.Mutex
	stop func()
}

// Watch registers the gauges with register, unless they are registered
// already or were unregistered for good.
func (g *Registration) Watch(register func() (unregister func())) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stop == nil {
		g.stop = register()
	}
}

// Unwatch unregisters the gauges, for good.
func (g *Registration) Unwatch() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stop != nil {
		g.stop()
	}
	g.stop = func() {}
}
