package test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/pgbox/pgbox/health"
	"github.com/pgbox/pgbox/internal/brokertest"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/tables"
	"github.com/pgbox/pgbox/internal/telemetry"
	"github.com/pgbox/pgbox/internal/telemetry/telemetrytest"
	"github.com/pgbox/pgbox/relay"
)

// failCounter counts a publisher's failed publishes.
type failCounter struct {
	message.Publisher
	failed atomic.Int64
}

func (f *failCounter) Publish(topic string, msgs ...*message.Message) error {
	err := f.Publisher.Publish(topic, msgs...)
	if err != nil {
		f.failed.Add(1)
	}
	return err
}

// A broker outage is not the messages' fault. NATS, killed with rows
// waiting and down for more failed rounds than MaxAttempts allows, pauses
// the relay: no row is charged an attempt or goes dead, the health check
// warns and the gauge shows it, the logs say it once (down, then up), and
// once the broker is back every order is paid exactly once.
func TestBrokerOutageCostsNoAttempts(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t, brokertest.NATS)
	runBrokerOutage(t, srv, natsBrokerAt(t, srv.URL(), "outage"))
}

// runBrokerOutage is TestBrokerOutageCostsNoAttempts on broker b, served
// by srv, which the test takes down and brings back.
func runBrokerOutage(t *testing.T, srv outage, b broker) {
	p := newProducer(t, b.topic)
	c := startConsumer(t, b)

	const maxAttempts = 2
	logs := &logtest.Recorder{}
	reader := sdkmetric.NewManualReader()
	pub := &failCounter{Publisher: b.publisher}
	r := p.startRelayWith(t, relay.Config{
		// Longer than NATS's 5s publish timeout: a lease that expired
		// under a hung publish would rightly charge an attempt.
		Lease:             30 * time.Second,
		Logger:            slog.New(logs),
		MaxAttempts:       maxAttempts,
		MeterProvider:     sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		OutageBackoffFunc: func(int) time.Duration { return 100 * time.Millisecond },
		Publisher:         pub,
	})

	const orders = 200
	for i := range orders / 2 {
		p.place(t, order{ID: orderID(i), Cents: i}, fmt.Sprintf("customer-%d", i%7), true)
	}
	waitPublished(t, p)

	srv.Kill(t)
	for i := orders / 2; i < orders; i++ {
		p.place(t, order{ID: orderID(i), Cents: i}, fmt.Sprintf("customer-%d", i%7), true)
	}
	// More failed rounds than a row has attempts, each NATS's publish
	// timeout (5s) long, and each more than the outage backoff apart.
	require.Eventually(t, func() bool { return pub.failed.Load() > maxAttempts }, 2*time.Minute, 10*time.Millisecond)
	require.ErrorContains(t, r.BrokerErr(), "the broker is unreachable")
	require.Equal(t, map[string]int64{"": 1}, telemetrytest.Gauges(t, reader, telemetry.RelayBrokerDown, ""))
	checker, err := health.New(p.pool, health.Config{BacklogAgeMax: -1, Relays: []*relay.Relay{r}, Schema: p.schema})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	checker.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusOK, rec.Code, "an outage costs latency, not messages: a warning")
	require.Contains(t, rec.Body.String(), `"name": "broker relay",
      "status": "warn"`)
	require.LessOrEqual(t, maxOutboxAttempts(t, p), 1, "an outage charges no attempt (the round under way has claimed one)")

	srv.Restart(t)
	requireOutageCostNothing(t, p, c, r, logs, orders)
	require.Equal(t, map[string]int64{"": 0}, telemetrytest.Gauges(t, reader, telemetry.RelayBrokerDown, ""))
	require.LessOrEqual(t, logs.Count(slog.LevelError, ""), 2, "down once, and still down at most once a minute")
}

// requireOutageCostNothing checks a relay r, after a broker outage it
// paused through, once the broker is back: every row published and
// received (each delivered twice: Duplicator), each of the orders paid
// once, no row dead or charged for the outage, the outage over, and said
// once each way in logs, with no row's failure logged.
func requireOutageCostNothing(t *testing.T, p *producer, c *consumer, r *relay.Relay, logs *logtest.Recorder, orders int) {
	t.Helper()
	waitPublished(t, p)
	c.waitSettled(t, 2*int64(orders), orders)
	payments := c.paymentsPerOrder(t)
	require.Len(t, payments, orders)
	for id, n := range payments {
		require.Equal(t, 1, n, "order %s must be paid exactly once", id)
	}
	var dead int
	require.NoError(t, p.pool.QueryRow(context.Background(), ident.Render(
		"SELECT count(*) FROM /* schema */outbox WHERE status = "+tables.OutboxDead, p.schema)).Scan(&dead))
	require.Zero(t, dead)
	require.LessOrEqual(t, maxOutboxAttempts(t, p), 1, "every row published on its first charged attempt")
	require.NoError(t, r.BrokerErr())
	require.Equal(t, 1, logs.Count(slog.LevelError, "the broker is unreachable"))
	require.Equal(t, 1, logs.Count(slog.LevelInfo, "the broker is reachable again"))
	require.Zero(t, logs.Count(slog.LevelWarn, "publish failed"), "no row's failure is logged")
}

// maxOutboxAttempts returns the most attempts charged to one of a
// producer's outbox rows.
func maxOutboxAttempts(t *testing.T, p *producer) (n int) {
	t.Helper()
	require.NoError(t, p.pool.QueryRow(context.Background(), ident.Render(
		"SELECT coalesce(max(attempts), 0) FROM /* schema */outbox", p.schema)).Scan(&n))
	return n
}

// publishedRows counts the producer's published outbox rows.
func publishedRows(t *testing.T, p *producer) (n int) {
	t.Helper()
	require.NoError(t, p.pool.QueryRow(context.Background(), ident.Render(
		"SELECT count(*) FROM /* schema */outbox WHERE status = "+tables.OutboxPublished, p.schema)).Scan(&n))
	return n
}
