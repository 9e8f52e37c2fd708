package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// probeLog records the probe numbers a dispatcher asks its
// UnavailableBackoffFunc for: one per call that found the dependency down
// and counted (the one that began the outage, then each failed probe).
type probeLog struct {
	mu     sync.Mutex
	probes []int
	wait   func(probe int) time.Duration
}

func (p *probeLog) backoff(probe int) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probes = append(p.probes, probe)
	return p.wait(probe)
}

func (p *probeLog) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.probes)
}

// consecutive checks that the probe numbers went 1, 2, 3 …: each probe
// that found the dependency still down backed off longer.
func (p *probeLog) consecutive(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, n := range p.probes {
		require.Equal(t, i+1, n, "probes %v", p.probes)
	}
}

// A dependency down for a while costs no message an attempt, whatever its
// MaxAttempts, in-transaction or leased: every message stays pending with
// its attempts and last error untouched, and the in-transaction neighbours
// in the same batches are handled once, their writes kept, the failing
// handler's rolled back. While the dispatcher backs off, nothing calls the
// handler: here the backoff turns to an hour after a few probes, and the
// calls stop while claims go on. The outage shows in the health check, a
// gauge and one log line. A second dispatcher (another process) finds the
// outage for itself, and once its probe answers, handles every message
// exactly once, on its first counted attempt.
func TestADownstreamOutageCostsNoAttempts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		leased      bool
		maxAttempts int
	}{
		{"in-tx, 1 attempt", false, 1},
		{"leased, 1 attempt", true, 1},
		{"in-tx, 3 attempts", false, 3},
		{"leased, 2 attempts", true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var err error
			b.inbox, err = inbox.New(b.pool, inbox.Config{Consumer: consumer, MaxAttempts: tc.maxAttempts, Schema: b.schema})
			require.NoError(t, err)
			claims, traceClaims := statements(claimMarker)
			b.pool = pgtest.TracedPool(t, b.pool, traceClaims)
			var down, hold atomic.Bool
			down.Store(true)
			var callsWhileDown atomic.Int64
			gateway := func(ctx context.Context, m *dispatcher.Message) error {
				if down.Load() {
					callsWhileDown.Add(1)
					return dispatcher.Unavailable(errors.New("gateway: connection refused"))
				}
				return nil
			}
			charge := dispatcher.Leased(func(ctx context.Context, m *dispatcher.Message) error {
				if err := gateway(ctx, m); err != nil {
					return err
				}
				_, err := b.pool.Exec(ctx, b.sql("INSERT INTO /* schema */effects (message_id, attempt) VALUES ($1, $2)"), m.ID, m.Attempt)
				return err
			})
			if !tc.leased {
				charge = dispatcher.InTx(func(ctx context.Context, tx pgx.Tx, m *dispatcher.Message) error {
					if err := b.recordEffect(ctx, tx, m); err != nil { // rolled back if the gateway is down
						return err
					}
					return gateway(ctx, m)
				})
			}
			wait := func(int) time.Duration {
				if hold.Load() {
					return time.Hour
				}
				return 20 * time.Millisecond
			}
			const workers = 4
			config := func(probes *probeLog, logs *logtest.Recorder, reader *sdkmetric.ManualReader) dispatcher.Config {
				return dispatcher.Config{
					BatchSize: 8,
					Handlers: map[string]dispatcher.Handler{
						"ChargeCard":  charge,
						"OrderPlaced": dispatcher.InTx(b.recordEffect),
					},
					Logger:                 slog.New(logs),
					MeterProvider:          sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
					UnavailableBackoffFunc: probes.backoff,
					Workers:                workers,
				}
			}
			probes, logs, reader := &probeLog{wait: wait}, &logtest.Recorder{}, sdkmetric.NewManualReader()
			d := b.start(t, config(probes, logs, reader))
			var msgs []inbox.Message
			for i := range 100 {
				eventType := "ChargeCard"
				if i%2 == 1 {
					eventType = "OrderPlaced"
				}
				msgs = append(msgs, inbox.Message{ID: fmt.Sprintf("m-%03d", i), EventType: eventType})
			}
			b.receiveMsgs(t, msgs...)

			// The neighbours are handled; the charges wait through probes,
			// then through an hour's backoff, with no call.
			b.waitFor(t, "SELECT count(*) = 50 FROM /* schema */inbox WHERE event_type = 'OrderPlaced' AND status = 'done'")
			require.Eventually(t, func() bool { return probes.count() >= 3 }, 30*time.Second, time.Millisecond)
			hold.Store(true)
			held := probes.count() + 1
			require.Eventually(t, func() bool { return probes.count() >= held }, 30*time.Second, time.Millisecond)
			calls, claimed := callsWhileDown.Load(), claims.Load()
			require.Eventually(t, func() bool { return claims.Load() >= claimed+20 }, 30*time.Second, time.Millisecond)
			require.Equal(t, calls, callsWhileDown.Load(), "no call while backing off")
			// Every call was a probe, or under way when the outage began.
			require.LessOrEqual(t, calls, int64(probes.count()+workers-1))
			probes.consecutive(t)

			require.ErrorContains(t, d.UnavailableErr(), `event type "ChargeCard" not claimed for`)
			require.ErrorContains(t, d.UnavailableErr(), "gateway: connection refused")
			require.Equal(t, map[string]int64{"ChargeCard": 1}, telemetrytest.Gauges(t, reader, telemetry.DispatcherUnavailable, string(telemetry.AttrEventType)))
			checker, err := health.New(b.pool, health.Config{BacklogAgeMax: -1, Dispatchers: []*dispatcher.Dispatcher{d}, Schema: b.schema})
			require.NoError(t, err)
			rec := httptest.NewRecorder()
			checker.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			require.Equal(t, http.StatusOK, rec.Code, "an outage downstream warns: %s", rec.Body)
			require.Contains(t, rec.Body.String(), `"name": "unavailable payments"`)
			require.Contains(t, rec.Body.String(), "gateway: connection refused")
			require.Equal(t, 1, logs.Count(slog.LevelError, "reports its dependency unavailable"))
			var charged int
			b.scalar(t, &charged, `SELECT count(*) FROM /* schema */inbox
				WHERE event_type = 'ChargeCard' AND (status NOT IN ('pending', 'running') OR attempts > 1 OR last_error IS NOT NULL OR errors <> '[]')`)
			require.Zero(t, charged, "no charge was charged an attempt, failed or died")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, d.Stop(ctx))

			// Another process: it finds the outage for itself, then the
			// dependency comes back, and its probe ends the outage.
			hold.Store(false)
			probes, logs, reader = &probeLog{wait: wait}, &logtest.Recorder{}, sdkmetric.NewManualReader()
			d = b.start(t, config(probes, logs, reader))
			require.Eventually(t, func() bool { return probes.count() >= 1 }, 30*time.Second, time.Millisecond)
			down.Store(false)
			b.waitSettled(t)
			effects := b.effects(t)
			require.Len(t, effects, 100)
			for id, n := range effects {
				require.Equal(t, 1, n, id)
			}
			var firstTime int
			b.scalar(t, &firstTime, "SELECT count(*) FROM /* schema */inbox WHERE status = 'done' AND attempts = 1 AND last_error IS NULL")
			require.Equal(t, 100, firstTime)
			require.NoError(t, d.UnavailableErr())
			require.Equal(t, 1, logs.Count(slog.LevelError, "reports its dependency unavailable"))
			require.Equal(t, 1, logs.Count(slog.LevelInfo, "available again"))
			require.Equal(t, map[string]int64{"ChargeCard": 0}, telemetrytest.Gauges(t, reader, telemetry.DispatcherUnavailable, string(telemetry.AttrEventType)))
		})
	}
}

// A handler whose dependency never comes back kills no message: the
// dispatcher keeps probing, one call per backoff, the backoff growing to
// its cap; it is no stall, though the watchdog looks between probes; and
// Stop still returns at once.
func TestADependencyDownForeverKeepsProbing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var err error
	b.inbox, err = inbox.New(b.pool, inbox.Config{Consumer: consumer, MaxAttempts: 1, Schema: b.schema})
	require.NoError(t, err)
	var calls atomic.Int64
	// Probes come further apart than the stall timeout once the backoff is
	// capped, so that the watchdog looks between them. The window is well
	// above a probe's time on a loaded machine: a probe that takes the
	// whole window is a stall, rightly, but not this one.
	const stallTimeout, capped = time.Second, 1500 * time.Millisecond
	probes := &probeLog{wait: func(probe int) time.Duration { return min(time.Duration(probe)*capped/6, capped) }}
	looks, traceLooks := statements(dueMarker)
	logs := &logtest.Recorder{}
	d, err := dispatcher.New(pgtest.TracedPool(t, b.pool, traceLooks), b.config(t, dispatcher.Config{
		Handlers: map[string]dispatcher.Handler{"ChargeCard": dispatcher.Leased(func(context.Context, *dispatcher.Message) error {
			calls.Add(1)
			return dispatcher.Unavailable(errors.New("smtp: 421 service not available"))
		})},
		Logger:                 slog.New(logs),
		StallTimeout:           stallTimeout,
		UnavailableBackoffFunc: probes.backoff,
	}))
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	b.receiveAs(t, "ChargeCard", ids("mail", 20)...)

	require.Eventually(t, func() bool { return probes.count() >= 6 }, 30*time.Second, time.Millisecond) // capped from here
	looked := looks.Load()
	require.Eventually(t, func() bool { return probes.count() >= 9 && looks.Load() >= looked+3 }, 30*time.Second, time.Millisecond)
	probes.consecutive(t)
	require.LessOrEqual(t, calls.Load(), int64(probes.count()+3), "one call per probe, and one per worker at the start")
	var dead, charged int
	b.scalar(t, &dead, "SELECT count(*) FROM /* schema */inbox WHERE status = 'dead'")
	b.scalar(t, &charged, "SELECT count(*) FROM /* schema */inbox WHERE attempts > 1 OR last_error IS NOT NULL")
	require.Zero(t, dead)
	require.Zero(t, charged)
	require.NoError(t, d.StallErr())
	require.Zero(t, logs.Count(slog.LevelError, "no progress"))
	require.Equal(t, 1, logs.Count(slog.LevelError, "reports its dependency unavailable"))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, d.Stop(ctx))
	require.Zero(t, logs.Count(slog.LevelWarn, "stop deadline reached"), "Stop waited for nothing")
	var pending int
	b.scalar(t, &pending, "SELECT count(*) FROM /* schema */inbox WHERE status = 'pending' AND attempts = 0")
	require.Equal(t, 20, pending)
}
