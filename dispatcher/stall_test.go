package dispatcher_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/health"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/internal/telemetry"
	"github.com/pgbox/pgbox/internal/telemetry/telemetrytest"
)

// A dispatcher whose one worker is held by a handler that does not return
// while other messages wait is stalled: it says so once, with the worker
// held, in the gauge and the failing health check, until the handler
// returns and messages are finished again.
func TestAHeldWorkerWithMessagesWaitingIsAStall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started, release := make(chan struct{}), make(chan struct{})
	logs := &logtest.Recorder{}
	reader := sdkmetric.NewManualReader()
	const stallTimeout = 300 * time.Millisecond
	d := b.start(t, dispatcher.Config{
		BatchSize: 1,
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(ctx context.Context, _ pgx.Tx, m *dispatcher.Message) error {
			if m.ID == "held" {
				close(started)
				select { // the stop's cancel ends it, should the test fail first
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		})},
		Logger:        slog.New(logs),
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		StallTimeout:  stallTimeout,
		Workers:       1,
	})
	b.receive(t, "held")
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the held handler never started")
	}
	b.receive(t, "waiting")

	require.EventuallyWithT(t, func(c *assert.CollectT) { // the cause may show a look later
		err := d.StallErr()
		require.Error(c, err)
		assert.ErrorContains(c, err, "rows wait")
		assert.ErrorContains(c, err, "1 workers inside a batch")
	}, 30*time.Second, time.Millisecond)
	// Said once ("held" may have finished slowly enough to stall it for
	// a moment before, said and cleared the same way).
	require.Equal(t, logs.Count(slog.LevelInfo, "dispatcher (payments): progress again")+1, logs.Count(slog.LevelError, "dispatcher (payments): no progress"))
	require.Equal(t, map[string]int64{consumer: 1}, telemetrytest.Gauges(t, reader, telemetry.Stalled, string(telemetry.AttrConsumer)))
	checker, err := health.New(b.pool, health.Config{BacklogAgeMax: -1, Dispatchers: []*dispatcher.Dispatcher{d}, Schema: b.schema})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	checker.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Contains(t, rec.Body.String(), "no row finished for")

	close(release)
	b.waitFor(t, "SELECT count(*) = 2 FROM /* schema */inbox WHERE status = 'done'")
	require.Eventually(t, func() bool { return d.StallErr() == nil }, 30*time.Second, time.Millisecond)
	// Each stall is cleared once, and said so ("waiting" finishing slowly
	// after "held" may stall it again for a moment: the window is 300ms).
	require.Positive(t, logs.Count(slog.LevelInfo, "progress again"))
	require.Equal(t, logs.Count(slog.LevelError, "no progress"), logs.Count(slog.LevelInfo, "progress again"))
	require.Equal(t, map[string]int64{consumer: 0}, telemetrytest.Gauges(t, reader, telemetry.Stalled, string(telemetry.AttrConsumer)))
}

// Messages that wait for time or for an operator are not a stall: one
// backing off after failures, and the messages of its ordering key held
// behind it once it is dead.
func TestMessagesThatWaitForTimeOrAnOperatorAreNoStall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var err error
	b.inbox, err = inbox.New(b.pool, inbox.Config{Consumer: consumer, MaxAttempts: 2, Schema: b.schema})
	require.NoError(t, err)
	// The watchdog's reads of the backlog, counted on the dispatcher's pool.
	var looks atomic.Int64
	traced := pgtest.TracedPool(t, b.pool, pgtest.QueryArgs(func(sql string, _ []any) {
		if strings.Contains(sql, "LIMIT 1), 0)::float8") {
			looks.Add(1)
		}
	}))
	failures := make(chan struct{}, 100)
	logs := &logtest.Recorder{}
	// A window well above a batch's time on a loaded machine (make test
	// runs packages in parallel, under -race, on 2 cores): a batch that
	// takes the whole window is a stall, rightly, but not this one.
	const stallTimeout = 3 * time.Second
	var d *dispatcher.Dispatcher
	d, err = dispatcher.New(traced, b.config(t, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(context.Context, pgx.Tx, *dispatcher.Message) error {
			failures <- struct{}{}
			return errors.New("declined")
		})},
		Logger:           slog.New(logs),
		RetryBackoffFunc: func(int) time.Duration { return 2 * stallTimeout },
		StallTimeout:     stallTimeout,
	}))
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })

	b.receiveMsgs(t, inbox.Message{ID: "head", EventType: "OrderPlaced", OrderingKey: "k"},
		inbox.Message{ID: "next", EventType: "OrderPlaced", OrderingKey: "k"})
	b.waitFor(t, "SELECT status = 'dead' FROM /* schema */inbox WHERE message_id = 'head'")
	require.Len(t, failures, 2)
	require.Positive(t, looks.Load(), "the watchdog looked while the head backed off")
	// Dead, the head holds "next": let the watchdog look three times more.
	seen := looks.Load()
	require.Eventually(t, func() bool { return looks.Load() >= seen+3 }, 30*time.Second, time.Millisecond)
	require.NoError(t, d.StallErr())
	require.Zero(t, logs.Count(slog.LevelError, "no progress"))
}
