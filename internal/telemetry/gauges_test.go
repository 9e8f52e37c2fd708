package telemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/internal/telemetry"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// gauge reads a gauge's single value.
func gauge(t *testing.T, rm metricdata.ResourceMetrics, name string) float64 {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch data := m.Data.(type) {
			case metricdata.Gauge[int64]:
				require.Len(t, data.DataPoints, 1)
				return float64(data.DataPoints[0].Value)
			case metricdata.Gauge[float64]:
				require.Len(t, data.DataPoints, 1)
				return data.DataPoints[0].Value
			}
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// The backlog counts every pending message; the age is that of the oldest
// claimable one, since it became due: a message backing off, or held
// behind a dead message of its key, is not aged.
func TestBacklogGauges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	_, err := pool.Exec(ctx, ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, max_attempts, payload_hash, payload, ordering_key, available_at, bucket)
		VALUES ('c', 'due-1h', 'T', 'pending', 3, '\x00', '', NULL, now() - interval '1 hour', /* schema */inbox_bucket('due-1h')),
		       ('c', 'due-now', 'T', 'pending', 3, '\x00', '', NULL, now(), /* schema */inbox_bucket('due-now')),
		       ('c', 'backoff', 'T', 'pending', 3, '\x00', '', NULL, now() + interval '1 hour', /* schema */inbox_bucket('backoff')),
		       ('c', 'head', 'T', 'dead', 3, '\x00', '', 'k', now() - interval '3 hours', /* schema */inbox_bucket('head')),
		       ('c', 'behind-dead', 'T', 'pending', 3, '\x00', '', 'k', now() - interval '2 hours', /* schema */inbox_bucket('behind-dead')),
		       ('other', 'x', 'T', 'pending', 3, '\x00', '', NULL, now() - interval '5 hours', /* schema */inbox_bucket('x'));
		INSERT INTO /* schema */outbox (id, topic, event_type, payload, status, available_at, bucket)
		SELECT r.id, 't', 'T', '', r.status, r.available_at, /* schema */outbox_bucket(r.id)
		FROM (SELECT gen_random_uuid() AS id, s AS status, a AS available_at
		      FROM (VALUES ('pending', now() - interval '10 minutes'), ('running', now() + interval '1 minute'),
		                   ('published', now() - interval '1 day')) AS v(s, a)) AS r`, schema))
	require.NoError(t, err)

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	stopInbox := telemetry.NewDispatcher(mp, nil, "c").WatchBacklog(pool, schema)
	stopOutbox := telemetry.NewRelay(mp, nil, propagation.TraceContext{}).WatchLag(pool, schema)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	require.EqualValues(t, 4, gauge(t, rm, telemetry.InboxBacklog))
	age := gauge(t, rm, telemetry.InboxOldestPendingAge)
	require.GreaterOrEqual(t, age, time.Hour.Seconds())
	require.Less(t, age, (time.Hour + time.Minute).Seconds(), "the message behind a dead head is not aged")
	require.EqualValues(t, 2, gauge(t, rm, telemetry.OutboxBacklog))
	lag := gauge(t, rm, telemetry.RelayLag)
	require.GreaterOrEqual(t, lag, (10 * time.Minute).Seconds())
	require.Less(t, lag, (11 * time.Minute).Seconds())

	n, wait, err := telemetry.ReadInboxBacklog(ctx, pool, schema, "c")
	require.NoError(t, err)
	require.EqualValues(t, 4, n)
	require.GreaterOrEqual(t, wait, time.Hour)

	stopInbox()
	stopOutbox()
	rm = metricdata.ResourceMetrics{}
	require.NoError(t, reader.Collect(ctx, &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Gauge[int64]:
				require.Empty(t, data.DataPoints, m.Name)
			case metricdata.Gauge[float64]:
				require.Empty(t, data.DataPoints, m.Name)
			}
		}
	}
}

// Messages an operator paused are counted but not aged: they wait for the
// operator's resume, not for a worker. A pause of their event type leaves
// the other types aged; a pause of the whole consumer leaves none; a
// pause of another consumer changes nothing.
func TestPausedMessagesAreNotAged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	exec := func(q string) {
		t.Helper()
		_, err := pool.Exec(ctx, ident.Render(q, schema))
		require.NoError(t, err)
	}
	exec(`INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, max_attempts, payload_hash, payload, available_at, bucket)
		VALUES ('c', 'charge', 'ChargeCard', 'pending', 3, '\x00', '', now() - interval '2 hours', /* schema */inbox_bucket('charge')),
		       ('c', 'mail', 'SendMail', 'pending', 3, '\x00', '', now() - interval '1 hour', /* schema */inbox_bucket('mail'))`)
	age := func() time.Duration {
		t.Helper()
		n, age, err := telemetry.ReadInboxBacklog(ctx, pool, schema, "c")
		require.NoError(t, err)
		require.EqualValues(t, 2, n, "paused messages are counted")
		return age
	}
	exec(`INSERT INTO /* schema */consumer_pauses (consumer, paused_by) VALUES ('other', 'alice')`)
	require.GreaterOrEqual(t, age(), 2*time.Hour)
	exec(`INSERT INTO /* schema */consumer_pauses (consumer, event_type, paused_by) VALUES ('c', 'ChargeCard', 'alice')`)
	require.GreaterOrEqual(t, age(), time.Hour)
	require.Less(t, age(), 2*time.Hour, "the paused charge is not aged")
	exec(`INSERT INTO /* schema */consumer_pauses (consumer, paused_by) VALUES ('c', 'alice')`)
	require.Zero(t, age(), "the whole consumer is paused")
}
