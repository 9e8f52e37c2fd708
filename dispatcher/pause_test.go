package dispatcher_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// statements counts the statements a traced pool sends whose text contains
// marker.
func statements(marker string) (*atomic.Int64, pgtest.QueryArgs) {
	var n atomic.Int64
	return &n, func(sql string, _ []any) {
		if strings.Contains(sql, marker) {
			n.Add(1)
		}
	}
}

// Markers of the claim and of the stall watchdog's read of the backlog.
const (
	claimMarker = "FOR UPDATE SKIP LOCKED"
	dueMarker   = "LIMIT 1), 0)::float8"
)

// A pause of one event type, seen by every dispatcher of the consumer (two
// here, as two processes would run), stops their claims of its messages
// and of nothing else: the others are handled, the paused ones wait as
// pending with no attempt spent, a keyed one holding its key, and the
// dispatchers say so once each, in their health (a warning naming who
// paused and why), a gauge, and not as a stall. Deleting the pause resumes
// them.
func TestAPauseOfAnEventTypeStopsItsClaimsUntilResumed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	claims, traceClaims := statements(claimMarker)
	looks, traceLooks := statements(dueMarker)
	traced := pgtest.TracedPool(t, b.pool, pgtest.QueryArgs(func(sql string, args []any) {
		traceClaims(sql, args)
		traceLooks(sql, args)
	}))
	logs := &logtest.Recorder{}
	reader := sdkmetric.NewManualReader()
	const stallTimeout = 500 * time.Millisecond
	var ds []*dispatcher.Dispatcher
	for range 2 {
		d, err := dispatcher.New(traced, b.config(t, dispatcher.Config{
			Handlers: map[string]dispatcher.Handler{
				"OrderPlaced": dispatcher.InTx(b.recordEffect),
				"ChargeCard":  dispatcher.InTx(b.recordEffect),
			},
			Logger:        slog.New(logs),
			MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
			StallTimeout:  stallTimeout,
			// One worker: once PauseErr shows the pause, no claim made
			// before it was read can still be under way.
			Workers: 1,
		}))
		require.NoError(t, err)
		require.NoError(t, d.Start(context.Background()))
		t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
		ds = append(ds, d)
	}

	b.exec(t, `INSERT INTO /* schema */consumer_pauses (consumer, event_type, paused_by, reason)
		VALUES ($1, 'ChargeCard', 'alice', 'gateway maintenance')`, consumer)
	for _, d := range ds {
		require.Eventually(t, func() bool { return d.PauseErr() != nil }, 30*time.Second, time.Millisecond)
	}
	require.ErrorContains(t, ds[0].PauseErr(), `messages of event type "ChargeCard" paused by "alice" since`)
	require.ErrorContains(t, ds[0].PauseErr(), `reason "gateway maintenance"`)

	b.receiveAs(t, "ChargeCard", ids("charge", 10)...)
	b.receiveMsgs(t, inbox.Message{ID: "keyed-charge", EventType: "ChargeCard", OrderingKey: "k"},
		inbox.Message{ID: "keyed-order", EventType: "OrderPlaced", OrderingKey: "k"})
	b.receive(t, ids("order", 10)...)
	b.waitFor(t, "SELECT count(*) = 10 FROM /* schema */inbox WHERE status = 'done'")
	// Claims and the watchdog go on over the paused messages, and leave
	// them. (A loaded machine may have stalled the dispatchers for a moment
	// before: only the paused messages are left from here on.)
	stalls := logs.Count(slog.LevelError, "no progress")
	claimed, looked := claims.Load(), looks.Load()
	require.Eventually(t, func() bool { return claims.Load() >= claimed+10 && looks.Load() >= looked+3 }, 30*time.Second, time.Millisecond)
	var untouched int
	b.scalar(t, &untouched, `SELECT count(*) FROM /* schema */inbox
		WHERE status = 'pending' AND attempts = 0 AND (event_type = 'ChargeCard' OR message_id = 'keyed-order')`)
	require.Equal(t, 12, untouched, "the paused messages, and the one behind a paused head of its key, wait")
	for _, d := range ds {
		require.NoError(t, d.StallErr())
	}
	require.Equal(t, stalls, logs.Count(slog.LevelError, "no progress"), "the paused messages are no stall")
	require.Equal(t, 2, logs.Count(slog.LevelWarn, "dispatcher: paused by an operator"), "once per dispatcher")
	require.Equal(t, map[string]int64{"ChargeCard": 1}, telemetrytest.Gauges(t, reader, telemetry.DispatcherPaused, string(telemetry.AttrEventType)))

	checker, err := health.New(b.pool, health.Config{BacklogAgeMax: -1, Dispatchers: ds[:1], Schema: b.schema})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	checker.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusOK, rec.Code, "a pause is no failure: %s", rec.Body)
	require.Contains(t, rec.Body.String(), `"status": "warn"`)
	require.Contains(t, rec.Body.String(), `paused by \"alice\"`)

	b.exec(t, "DELETE FROM /* schema */consumer_pauses")
	b.waitSettled(t)
	require.Len(t, b.effects(t), 22)
	var keyedInOrder bool
	b.scalar(t, &keyedInOrder, `SELECT (SELECT seq FROM /* schema */effects WHERE message_id = 'keyed-charge')
		< (SELECT seq FROM /* schema */effects WHERE message_id = 'keyed-order')`)
	require.True(t, keyedInOrder)
	for _, d := range ds { // the other may have handled them all
		require.Eventually(t, func() bool { return d.PauseErr() == nil }, 30*time.Second, time.Millisecond)
	}
	require.Equal(t, 2, logs.Count(slog.LevelInfo, "dispatcher: resumed"))
	require.Equal(t, map[string]int64{"ChargeCard": 0}, telemetrytest.Gauges(t, reader, telemetry.DispatcherPaused, string(telemetry.AttrEventType)))
}

// A pause of the whole consumer (event type ”) stops every claim: the
// dispatcher still looks at the pauses each poll interval, but sends no
// claim, and messages keep arriving and wait. The stall watchdog sees
// nothing due.
func TestAPauseOfTheWholeConsumerStopsEveryClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	claims, traceClaims := statements(claimMarker)
	reads, traceReads := statements("consumer_pauses")
	traced := pgtest.TracedPool(t, b.pool, pgtest.QueryArgs(func(sql string, args []any) {
		traceClaims(sql, args)
		traceReads(sql, args)
	}))
	logs := &logtest.Recorder{}
	d, err := dispatcher.New(traced, b.config(t, dispatcher.Config{
		Handlers:     map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(b.recordEffect)},
		Logger:       slog.New(logs),
		StallTimeout: 200 * time.Millisecond,
		Workers:      1, // as above
	}))
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })

	b.exec(t, `INSERT INTO /* schema */consumer_pauses (consumer, paused_by, reason) VALUES ($1, 'bob', 'incident 42')`, consumer)
	require.Eventually(t, func() bool { return d.PauseErr() != nil }, 30*time.Second, time.Millisecond)
	require.ErrorContains(t, d.PauseErr(), `the consumer's messages paused by "bob"`)
	claimed := claims.Load()
	b.receive(t, ids("m", 5)...)
	read := reads.Load()
	require.Eventually(t, func() bool { return reads.Load() >= read+5 }, 30*time.Second, time.Millisecond)
	require.Equal(t, claimed, claims.Load(), "no claim while the consumer is paused")
	var waiting int
	b.scalar(t, &waiting, "SELECT count(*) FROM /* schema */inbox WHERE status = 'pending' AND attempts = 0")
	require.Equal(t, 5, waiting)
	require.NoError(t, d.StallErr())

	b.exec(t, "DELETE FROM /* schema */consumer_pauses")
	b.waitSettled(t)
	require.Len(t, b.effects(t), 5)
	require.Equal(t, 1, logs.Count(slog.LevelWarn, "dispatcher: paused by an operator: the consumer's messages"))
	require.Equal(t, 1, logs.Count(slog.LevelInfo, "dispatcher: resumed: the consumer's messages"))
}

// A dispatcher started while its consumer is paused (a pod restarted
// during a pause) claims nothing from its first claim on: no worker
// claims before the pauses have been read.
func TestADispatcherStartedWhilePausedClaimsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reads, traceReads := statements("consumer_pauses")
	b.exec(t, `INSERT INTO /* schema */consumer_pauses (consumer, event_type, paused_by) VALUES ($1, 'OrderPlaced', 'carol')`, consumer)
	b.receive(t, ids("m", 20)...)
	d, err := dispatcher.New(pgtest.TracedPool(t, b.pool, traceReads), b.config(t, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(b.recordEffect)},
		Workers:  8,
	}))
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	require.Eventually(t, func() bool { return reads.Load() >= 12 }, 30*time.Second, time.Millisecond)
	require.Empty(t, b.effects(t))
	var untouched int
	b.scalar(t, &untouched, "SELECT count(*) FROM /* schema */inbox WHERE status = 'pending' AND attempts = 0")
	require.Equal(t, 20, untouched)
}
