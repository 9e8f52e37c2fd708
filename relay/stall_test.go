package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/pgbox/pgbox/health"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/internal/telemetry"
	"github.com/pgbox/pgbox/internal/telemetry/telemetrytest"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
)

// stallTimeout is the watchdog's window in these tests.
const stallTimeout = 300 * time.Millisecond

// stallBundle is a relay with a short stall timeout, its log and metrics.
type stallBundle struct {
	*testBundle
	logs   *logtest.Recorder
	reader *sdkmetric.ManualReader
	relay  *relay.Relay
}

// startStalling starts a relay on a new schema with the watchdog's window
// at stallTimeout; cfg gives the rest, prepare runs before Start.
func startStalling(t *testing.T, cfg relay.Config, prepare func(*testBundle)) *stallBundle {
	t.Helper()
	b := &stallBundle{testBundle: setup(t), logs: &logtest.Recorder{}, reader: sdkmetric.NewManualReader()}
	if prepare != nil {
		prepare(b.testBundle)
	}
	cfg.Logger = slog.New(b.logs)
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(b.reader))
	cfg.PollInterval = 10 * time.Millisecond
	cfg.StallTimeout = stallTimeout
	b.relay = b.start(t, cfg)
	return b
}

// requireStalled waits for the relay to report a stall whose error holds
// each of want, and checks that it is said once, in the gauge and in the
// health check.
func (b *stallBundle) requireStalled(t *testing.T, want ...string) {
	t.Helper()
	// The first report may come before the cause is known (a loaded
	// machine's claim can take the whole window): the report is to name
	// it once it is.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := b.relay.StallErr()
		require.Error(c, err)
		for _, w := range want {
			assert.ErrorContains(c, err, w)
		}
	}, 30*time.Second, time.Millisecond)
	// Said once; a loaded machine may have stalled the relay for a moment
	// before (the first row finishing slowly), said and cleared the same way.
	require.Equal(t, b.logs.Count(slog.LevelInfo, "relay: progress again")+1, b.logs.Count(slog.LevelError, "relay: no progress"))
	require.Equal(t, map[string]int64{"relay": 1}, telemetrytest.Gauges(t, b.reader, telemetry.Stalled, string(telemetry.AttrComponent)))
	code, checks := checkHealth(t, b.pool, b.schema, b.relay)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, health.StatusFail, checks["relay"].Status)
	require.Contains(t, checks["relay"].Error, "no row finished for")
}

// requireMovingAgain waits for the stall to clear once rows are published.
func (b *stallBundle) requireMovingAgain(t *testing.T) {
	t.Helper()
	b.waitPublished(t)
	require.Eventually(t, func() bool { return b.relay.StallErr() == nil }, 30*time.Second, time.Millisecond)
	// Each stall is cleared once, and said so. Rows finishing slowly after
	// the first one may stall the relay again for a moment (the window is
	// 300ms here): that is a change too, said and cleared the same way.
	require.Positive(t, b.logs.Count(slog.LevelInfo, "relay: progress again"))
	require.Equal(t, b.logs.Count(slog.LevelError, "relay: no progress"), b.logs.Count(slog.LevelInfo, "relay: progress again"))
	require.Equal(t, map[string]int64{"relay": 0}, telemetrytest.Gauges(t, b.reader, telemetry.Stalled, string(telemetry.AttrComponent)))
}

// A broker outage that goes on past the stall timeout is a stall, and the
// report names the outage as what the relay waits on.
func TestAnOutageThatLastsIsAStall(t *testing.T) {
	t.Parallel()
	var down = make(chan struct{})
	pub := &recorder{fail: func(string, *message.Message) error {
		select {
		case <-down:
			return nil
		default:
			return fmt.Errorf("dial: %w", relay.ErrBrokerUnreachable)
		}
	}}
	b := startStalling(t, relay.Config{
		OutageBackoffFunc: func(int) time.Duration { return 5 * time.Millisecond },
		Publisher:         pub,
	}, nil)
	b.write(t, outbox.Message{Topic: "t", EventType: "E"})
	b.requireStalled(t, "waiting on: publishing paused", "the broker is unreachable")
	close(down)
	b.requireMovingAgain(t)
}

// Claims that fail, the database refusing to record them, are a stall,
// and the report gives the claim's error. A claim record is answered after
// the batch is published: the first batch to find its record refused has
// published its rows and records them all the same, and the batches after
// it wait for their record before they publish.
func TestClaimsThatFailAreAStall(t *testing.T) {
	t.Parallel()
	pub := &recorder{}
	var stopRefusing func()
	b := startStalling(t, relay.Config{Publisher: pub}, func(b *testBundle) {
		stopRefusing = pgtest.Refuse(t, b.pool, b.schema, "claims refused", "BEFORE INSERT ON /* schema */outbox_claims", "true")
	})
	b.write(t, outbox.Message{Topic: "t", EventType: "E"})
	b.waitPublished(t)
	b.write(t, outbox.Message{Topic: "t", EventType: "E"})
	b.requireStalled(t, "1 rows wait, the oldest claimable due for", "the last claim failed", "test: claims refused")
	require.Len(t, pub.published(), 1, "no batch is published while its record is refused")
	stopRefusing()
	b.requireMovingAgain(t)
}

// Outcomes that cannot be recorded are a stall: the relay has published
// but cannot say so, and the report says that.
func TestOutcomesThatCannotBeRecordedAreAStall(t *testing.T) {
	t.Parallel()
	var stopRefusing func()
	b := startStalling(t, relay.Config{Publisher: &recorder{}}, func(b *testBundle) {
		stopRefusing = pgtest.Refuse(t, b.pool, b.schema, "publish outcomes rejected", "BEFORE UPDATE ON /* schema */outbox",
			"NEW.published_at IS NOT NULL AND OLD.published_at IS NULL")
	})
	// Two rows: the first is claimed and its outcome refused; the second
	// waits, due, while the relay claims nothing more.
	b.write(t, outbox.Message{Topic: "t", EventType: "E"})
	require.Eventually(t, func() bool { return b.relay.RecordErr() != nil }, 30*time.Second, time.Millisecond)
	b.write(t, outbox.Message{Topic: "t", EventType: "E"})
	b.requireStalled(t, "claiming paused", "outcomes cannot be recorded", "test: publish outcomes rejected")
	stopRefusing()
	b.requireMovingAgain(t)
}

// Claims that find nothing while rows are due (a frontier that skips
// them, or, here, another session holding their row locks, which the
// claim's SKIP LOCKED steps over) are a stall whose cause the relay does
// not know: the report says how many claims found nothing.
func TestClaimsThatFindNothingAreAStall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var tx pgx.Tx
	b := startStalling(t, relay.Config{Publisher: &recorder{}}, func(b *testBundle) {
		id := b.write(t, outbox.Message{Topic: "t", EventType: "E"})[0]
		var err error
		tx, err = b.pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		_, err = tx.Exec(ctx, b.sql("SELECT 1 FROM /* schema */outbox WHERE id = $1 FOR UPDATE"), id)
		require.NoError(t, err)
	})
	b.requireStalled(t, "1 rows wait, the oldest claimable due for", "claims since the last finished row took 0 rows")
	require.NoError(t, tx.Rollback(ctx))
	b.requireMovingAgain(t)
}

// A relay whose rows back off after failures is never stalled: rows keep
// being finished (failed and charged), and between them nothing is due.
func TestARetryingRelayIsNotStalled(t *testing.T) {
	t.Parallel()
	// A window well above a batch's time on a loaded machine (make test
	// runs packages in parallel, under -race, on 2 cores): a batch that
	// takes the whole window is a stall, rightly, but not this one.
	const stallTimeout = 3 * time.Second
	// The watchdog's reads of the backlog, counted on the relay's pool.
	var looks atomic.Int64
	b := &stallBundle{testBundle: setup(t), logs: &logtest.Recorder{}, reader: sdkmetric.NewManualReader()}
	traced := pgtest.TracedPool(t, b.pool, pgtest.QueryArgs(func(sql string, _ []any) {
		if strings.Contains(sql, "LIMIT 1), 0)::float8") {
			looks.Add(1)
		}
	}))
	refusals := make(chan struct{}, 1000)
	pub := &recorder{fail: func(string, *message.Message) error {
		refusals <- struct{}{}
		return fmt.Errorf("message too large")
	}}
	b.relay = startOn(t, traced, relay.Config{
		Logger:           slog.New(b.logs),
		MeterProvider:    sdkmetric.NewMeterProvider(sdkmetric.WithReader(b.reader)),
		PollInterval:     10 * time.Millisecond,
		Publisher:        pub,
		RetryBackoffFunc: func(int) time.Duration { return stallTimeout * 2 },
		Schema:           b.schema,
		StallTimeout:     stallTimeout,
	})
	b.write(t, outbox.Message{Topic: "refused", EventType: "E"})
	require.Eventually(t, func() bool { return len(refusals) >= 2 }, 30*time.Second, time.Millisecond) // once backed off
	seen := looks.Load()
	require.Eventually(t, func() bool { return looks.Load() >= seen+3 }, 30*time.Second, time.Millisecond)
	require.Positive(t, seen, "the watchdog looked while the row backed off")
	require.NoError(t, b.relay.StallErr())
	require.Zero(t, b.logs.Count(slog.LevelError, "relay: no progress"))
	require.Equal(t, map[string]int64{}, telemetrytest.Gauges(t, b.reader, telemetry.Stalled, string(telemetry.AttrComponent)))
}
