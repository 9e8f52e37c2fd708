package dispatcher_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/health"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/internal/telemetry"
	"github.com/pgbox/pgbox/internal/telemetry/telemetrytest"
)

// A dispatcher whose pool goes through a transaction-pooling PgBouncer,
// and which listens through it too (no ListenConnConfig), finds by its
// self-check that notifications do not arrive: it warns once, the gauge
// reports 0 for its consumer, the health check warns (still 200), and it
// goes on handling messages by polling.
func TestListenThroughTransactionPoolerIsReported(t *testing.T) {
	t.Parallel()
	pgtest.ListensThroughPooler(t)
	bouncer := pgtest.BouncerPool(t, 4)
	b := setup(t) // the schema and the inbox are on the test database's own pool
	logs := &logtest.Recorder{}
	reader := sdkmetric.NewManualReader()
	cfg := b.config(t, dispatcher.Config{
		Handlers:      map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(b.recordEffect)},
		Logger:        slog.New(logs),
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		PollInterval:  50 * time.Millisecond,
	})
	// As a deployment that forgot it: the LISTEN goes through the pooler.
	cfg.ListenConnConfig = nil
	d, err := dispatcher.New(bouncer, cfg)
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, d.Stop(ctx))
	})

	require.Eventually(t, func() bool { return d.NotifyErr() != nil }, time.Minute, 10*time.Millisecond)
	require.ErrorContains(t, d.NotifyErr(), "ListenConnConfig")
	require.ErrorContains(t, d.NotifyErr(), "PollOnly")
	require.Equal(t, 1, logs.Count(slog.LevelWarn, "notifications do not arrive"))
	require.Equal(t, map[string]int64{"dispatcher": 0},
		telemetrytest.Gauges(t, reader, telemetry.NotificationsArriving, string(telemetry.AttrComponent)))
	require.Equal(t, map[string]int64{consumer: 0},
		telemetrytest.Gauges(t, reader, telemetry.NotificationsArriving, string(telemetry.AttrConsumer)))

	checker, err := health.New(b.pool, health.Config{BacklogAgeMax: -1, Dispatchers: []*dispatcher.Dispatcher{d}, Schema: b.schema})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	checker.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusOK, rec.Code, "a warning costs latency, not correctness")
	var notifications *health.CheckResult
	for _, c := range checker.Check(context.Background()).Checks {
		if c.Name == "notifications "+consumer {
			notifications = &c
		}
	}
	require.NotNil(t, notifications, "the health check reports on the dispatcher's notifications")
	require.Equal(t, health.StatusWarn, notifications.Status)
	require.Contains(t, notifications.Error, "did not come back")

	// Polling handles what notifications no longer announce, once each.
	b.receive(t, "a", "b")
	b.waitSettled(t)
	require.Equal(t, map[string]int{"a": 1, "b": 1}, b.effects(t))
	require.Equal(t, 1, logs.Count(slog.LevelWarn, "notifications do not arrive"), "said once, not per poll")
}
