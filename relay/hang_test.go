package relay_test

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/pgbox/pgbox/health"
	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/telemetry"
	"github.com/pgbox/pgbox/internal/telemetry/telemetrytest"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/relay"
)

// hangingPublisher is a real Watermill publisher (GoChannel) whose calls
// to the topics in hang block until release is called, as a broker that
// takes a connection and never answers: a RabbitMQ blocked by a resource
// alarm, a network path that drops packets.
type hangingPublisher struct {
	message.Publisher
	hang     map[string]bool
	once     sync.Once
	released chan struct{} // closed by release

	mu      sync.Mutex
	hanging int // calls blocked now
	most    int // calls blocked at once, at most
}

func newHangingPublisher(t *testing.T, topics ...string) *hangingPublisher {
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	t.Cleanup(func() { require.NoError(t, ps.Close()) })
	p := &hangingPublisher{Publisher: ps, hang: map[string]bool{}, released: make(chan struct{})}
	for _, topic := range topics {
		p.hang[topic] = true
	}
	return p
}

func (p *hangingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.hang[topic] {
		p.mu.Lock()
		p.hanging++
		p.most = max(p.most, p.hanging)
		p.mu.Unlock()
		<-p.released
		p.mu.Lock()
		p.hanging--
		p.mu.Unlock()
	}
	return p.Publisher.Publish(topic, msgs...)
}

// release lets the blocked calls, and every later one, go through.
func (p *hangingPublisher) release() { p.once.Do(func() { close(p.released) }) }

// blocked returns how many calls are blocked now, and at most at once.
func (p *hangingPublisher) blocked() (now, most int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hanging, p.most
}

// A topic whose publish hangs does not hold up the others: the relay stops
// waiting after PublishTimeout, never records the hung message as
// published, and makes no new call to the topic while the hung one is out:
// the topic's other rows wait, uncharged. The round is in doubt (the
// broker took the other topic's messages first), so the hung message goes
// back uncharged; the next round, the probe, reaches the broker through
// the other topic, so the hang was the topic's own and the message is
// charged once. The topic hanging for three PublishTimeouts is an error:
// logged once, then at an interval, and named in BrokerErr, the gauge and
// the health check, until the call returns and the topic is published to
// again.
func TestHungTopicDoesNotHoldUpTheOthers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := newHangingPublisher(t, "stuck")
	logs := &logtest.Recorder{}
	reader := sdkmetric.NewManualReader()
	r := b.newRelay(t, relay.Config{
		// Batches of 4 and one worker, so that the rounds are known: the
		// first takes stuck row 0 and ok rows 1-3, the probe takes stuck
		// row 4 and ok rows 5-7 (older than row 0, handed back), and so on.
		BatchSize:         4,
		Lease:             2 * time.Second,
		Logger:            slog.New(logs),
		MeterProvider:     sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		OutageBackoffFunc: func(int) time.Duration { return 5 * time.Millisecond },
		PublishTimeout:    100 * time.Millisecond,
		Publisher:         pub,
		Workers:           1,
	})
	relay.SetOutageRemindEvery(r, 200*time.Millisecond)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(pub.release) // before the relay's Stop, should the test fail first

	var msgs []outbox.Message
	for i := range 12 {
		topic := "ok"
		if i%4 == 0 {
			topic = "stuck"
		}
		msgs = append(msgs, outbox.Message{Topic: topic, EventType: "E"})
	}
	b.write(t, msgs...)
	b.waitFor(t, "SELECT count(*) = 9 FROM /* schema */outbox WHERE topic = 'ok' AND status = 'published'")
	b.waitFor(t, `SELECT count(*) = 1 FROM /* schema */outbox, jsonb_array_elements(errors) AS e
		WHERE topic = 'stuck' AND e->>'error' LIKE 'publish: topic "stuck": no answer from the publisher within 100ms%'`)
	// The hung message is charged once; the topic's other rows, claimed
	// and handed back while the call is out, are never charged.
	b.waitFor(t, "SELECT sum(attempts) = 1 AND count(*) FILTER (WHERE errors <> '[]') = 1 FROM /* schema */outbox WHERE topic = 'stuck'")
	require.Equal(t, 1, logs.Count(slog.LevelWarn, "a Publish call got no answer"))
	require.Equal(t, 1, logs.Count(slog.LevelWarn, "a publish failed after others of its round went out"))
	var published bool
	require.NoError(t, b.pool.QueryRow(context.Background(), b.sql("SELECT EXISTS (SELECT 1 FROM /* schema */outbox WHERE topic = 'stuck' AND status = 'published')")).Scan(&published))
	require.False(t, published, "a hung message is never recorded published")
	_, most := pub.blocked()
	require.Equal(t, 1, most, "no new call to a hung topic while one is out")

	// Past three PublishTimeouts the topic is an error, said again at the
	// interval, and never taken for an outage: the broker answers.
	require.Eventually(t, func() bool { return logs.Count(slog.LevelError, "a topic still has not answered") >= 2 }, 30*time.Second, time.Millisecond)
	require.Equal(t, 1, logs.Count(slog.LevelError, "relay: a topic has not answered"))
	require.ErrorContains(t, r.BrokerErr(), `topic "stuck" has not answered for`)
	require.Equal(t, map[string]int64{"": 1}, telemetrytest.Gauges(t, reader, telemetry.RelayTopicsStuck, "none"))
	code, checks := checkHealth(t, b.pool, b.schema, r)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, health.StatusWarn, checks["broker relay"].Status)
	require.Contains(t, checks["broker relay"].Error, `topic "stuck" has not answered`)
	require.Zero(t, logs.Count(slog.LevelError, "the broker is unreachable"))

	pub.release()
	b.waitPublished(t)
	b.waitFor(t, "SELECT count(*) = 12 FROM /* schema */outbox WHERE status = 'published'")
	require.Eventually(t, func() bool { return logs.Count(slog.LevelInfo, "a Publish call given up on has returned") == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, r.BrokerErr())
	require.Equal(t, map[string]int64{"": 0}, telemetrytest.Gauges(t, reader, telemetry.RelayTopicsStuck, "none"))
}

// When every publish of a round hangs, it is an outage, as when the broker
// is unreachable: no attempt is charged however long it lasts (with
// MaxAttempts 1, one charge would make a row dead), the relay pauses and
// says why, and it publishes everything once the broker answers.
func TestEveryPublishHangingIsAnOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Count the relay's updates of the outbox (claims, outcomes): rounds.
	for _, q := range []string{
		`CREATE SEQUENCE /* schema */updates`,
		`CREATE FUNCTION /* schema */count_update() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM nextval('` + b.schema + `.updates');
			RETURN NULL;
		END $$`,
		`CREATE TRIGGER count_update AFTER UPDATE ON /* schema */outbox FOR EACH STATEMENT EXECUTE FUNCTION /* schema */count_update()`,
	} {
		_, err := b.pool.Exec(ctx, b.sql(q))
		require.NoError(t, err)
	}
	updates := func() (n int64) {
		require.NoError(t, b.pool.QueryRow(ctx, b.sql("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM /* schema */updates")).Scan(&n))
		return n
	}
	pub := newHangingPublisher(t, "a", "b")
	logs := &logtest.Recorder{}
	r := b.start(t, relay.Config{
		Lease:       time.Second,
		Logger:      slog.New(logs),
		MaxAttempts: 1,
		// One worker, so that one claim takes all three rows and the count
		// of calls below is exact: two workers may split them between two
		// claims, and each may then make its own first call to topic a.
		Workers:           1,
		OutageBackoffFunc: func(int) time.Duration { return 5 * time.Millisecond },
		PublishTimeout:    50 * time.Millisecond,
		Publisher:         pub,
	})
	t.Cleanup(pub.release)

	b.write(t, outbox.Message{Topic: "a", EventType: "E", OrderingKey: "k"}, outbox.Message{Topic: "b", EventType: "E"},
		outbox.Message{Topic: "a", EventType: "E"})
	require.Eventually(t, func() bool { return r.BrokerErr() != nil }, 30*time.Second, time.Millisecond)
	require.ErrorContains(t, r.BrokerErr(), "Config.PublishTimeout")
	seen := updates()
	require.Eventually(t, func() bool { return updates() >= seen+20 }, 30*time.Second, time.Millisecond, "rounds go on during the outage")
	b.waitFor(t, "SELECT bool_and(attempts <= 1 AND status <> 'dead' AND errors = '[]') FROM /* schema */outbox")
	require.Error(t, r.BrokerErr())

	pub.release()
	b.waitPublished(t)
	b.waitFor(t, "SELECT count(*) = 3 FROM /* schema */outbox WHERE status = 'published'")
	require.NoError(t, r.BrokerErr())
	require.Equal(t, 2, logs.Count(slog.LevelWarn, "a Publish call got no answer"), "one call per topic")
	require.Equal(t, 1, logs.Count(slog.LevelError, "the broker is unreachable"))
	require.Equal(t, 1, logs.Count(slog.LevelInfo, "the broker is reachable again"))
	require.Zero(t, logs.Count(slog.LevelWarn, "publish failed; will retry"))
}

// Stop does not wait for a hung publish past its context: the call's rows
// go back to pending with their attempt refunded, and Stop says that the
// call is still out. Once the publisher returns, nothing is left running.
func TestStopDoesNotWaitForAHungPublish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := newHangingPublisher(t, "t")
	r := b.start(t, relay.Config{Lease: time.Minute, PublishTimeout: 30 * time.Second, Publisher: pub})
	t.Cleanup(pub.release)
	b.write(t, outbox.Message{Topic: "t", EventType: "E"})
	require.Eventually(t, func() bool { now, _ := pub.blocked(); return now == 1 }, 30*time.Second, time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	stopping := time.Now()
	err := r.Stop(ctx)
	require.Less(t, time.Since(stopping), 10*time.Second, "Stop waited for the hung publish (PublishTimeout is 30s)")
	require.ErrorContains(t, err, "stopped, but 1 Publish calls that got no answer are still running")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	b.waitFor(t, "SELECT status = 'pending' AND attempts = 0 AND errors = '[]' FROM /* schema */outbox")

	pub.release()
	require.NoError(t, r.Stop(context.Background()), "the call returned: nothing left running")
}

// firstThenHang is a real Watermill publisher (GoChannel) whose first call
// goes through and every later one blocks until release: a broker that
// dies, by going silent, in the middle of a round.
type firstThenHang struct {
	*hangingPublisher
	calls atomic.Int64
}

func (p *firstThenHang) Publish(topic string, msgs ...*message.Message) error {
	if p.calls.Add(1) == 1 {
		return p.hangingPublisher.Publisher.Publish(topic, msgs...)
	}
	return p.hangingPublisher.Publish(topic, msgs...)
}

// A broker that goes silent after taking the first message of a round is
// an outage, not the rows' failure: the round is in doubt, the probe that
// follows at once reaches nothing (the topic still hangs), and the outage
// is declared: BrokerErr, the gauge, and one error log, with no attempt
// charged to any row, and every row published once the broker answers.
func TestABrokerThatDiesMidRoundIsAnOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	inner := newHangingPublisher(t)
	inner.hang = nil // firstThenHang decides
	pub := &firstThenHang{hangingPublisher: inner}
	pub.hangingPublisher.hang = map[string]bool{"t": true}
	logs := &logtest.Recorder{}
	reader := sdkmetric.NewManualReader()
	r := b.start(t, relay.Config{
		BatchSize:         3,
		Lease:             4 * time.Second,
		Logger:            slog.New(logs),
		MaxAttempts:       1, // one charge would make a row dead
		MeterProvider:     sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		OutageBackoffFunc: func(int) time.Duration { return 5 * time.Millisecond },
		PublishTimeout:    500 * time.Millisecond,
		Publisher:         pub,
		Workers:           1,
	})
	t.Cleanup(inner.release)

	b.write(t, outbox.Message{Topic: "t", EventType: "E"}, outbox.Message{Topic: "t", EventType: "E"}, outbox.Message{Topic: "t", EventType: "E"})
	require.Eventually(t, func() bool { return r.BrokerErr() != nil }, 30*time.Second, time.Millisecond)
	require.ErrorContains(t, r.BrokerErr(), "Config.PublishTimeout")
	require.Equal(t, map[string]int64{"": 1}, telemetrytest.Gauges(t, reader, telemetry.RelayBrokerDown, "none"))
	b.waitFor(t, "SELECT bool_and(status <> 'dead' AND errors = '[]') AND count(*) FILTER (WHERE status = 'published') = 1 FROM /* schema */outbox")

	inner.release()
	b.waitPublished(t)
	b.waitFor(t, "SELECT bool_and(status = 'published' AND attempts = 1 AND errors = '[]') FROM /* schema */outbox")
	require.NoError(t, r.BrokerErr())
	require.Equal(t, 1, logs.Count(slog.LevelError, ""), "one error log: the outage")
	require.Equal(t, 1, logs.Count(slog.LevelError, "the broker is unreachable"))
	require.Equal(t, 1, logs.Count(slog.LevelInfo, "the broker is reachable again"))
	require.Zero(t, logs.Count(slog.LevelWarn, "publish failed; will retry"))
}
