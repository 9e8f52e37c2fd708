package relay

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/pgbox/pgbox/internal/logtest"
	"github.com/pgbox/pgbox/internal/telemetry"
)

// A round reports the broker as it was when the round began. Two rounds
// begin while the broker is up; the broker dies; one fails, and the other,
// whose call was confirmed just before the crash, returns after. That
// success predates the outage and must not end it (it did, and the outage
// was logged twice: TestRabbitMQ/KilledMidRun failed so once in make
// test). Nor may a stale failure, after the probe found the broker back,
// start an outage again.
func TestAStaleRoundChangesNoOutage(t *testing.T) {
	logs := &logtest.Recorder{}
	o := testOutage(logs)
	stop := make(chan struct{})
	down := errors.New("connection refused")

	early, ok := o.await(stop)
	require.True(t, ok)
	late, ok := o.await(stop)
	require.True(t, ok)
	o.failed(early, down)
	require.Error(t, o.Err(), "down")

	o.reached(late)
	require.Error(t, o.Err(), "a success that began before the outage does not end it")
	o.idle(late)
	probe, ok := o.await(stop)
	require.True(t, ok, "a stale round does not hold the probe")
	o.reached(probe)
	require.NoError(t, o.Err(), "the probe ends it")

	o.failed(late, down)
	require.NoError(t, o.Err(), "a failure that began before the broker came back starts no outage")
	require.Equal(t, 1, logs.Count(slog.LevelError, "the broker is unreachable"))
	require.Equal(t, 1, logs.Count(slog.LevelInfo, "the broker is reachable again"))
}

// A probe of a broker that was down which reaches it with some calls and
// not others finds it coming back (Redis answering some connections
// first, or refusing writes while it loads its data): the outage ends,
// and the failed calls' rows were its victims, never charged. Kept in
// doubt, they were charged by the next round, which reached the broker:
// TestRedis/Outage failed so in make test (a row charged 2 attempts).
// A row that fails so again, with the broker reachable, is in doubt and
// charged as before.
func TestAProbeThatFindsTheBrokerComingBackChargesNoRow(t *testing.T) {
	logs := &logtest.Recorder{}
	o := testOutage(logs)
	stop := make(chan struct{})
	loading := errors.New("LOADING Redis is loading the dataset in memory")
	victims := []doubt{{err: loading, row: &row{}}}

	first, ok := o.await(stop)
	require.True(t, ok)
	o.failed(first, errors.New("connection refused"))
	probe, ok := o.await(stop)
	require.True(t, ok)
	require.Empty(t, o.mixed(probe, loading, victims))
	require.NoError(t, o.Err(), "the probe reached the broker: the outage is over")

	next, ok := o.await(stop)
	require.True(t, ok)
	require.Empty(t, o.reached(next), "the rows that failed as the broker came back are charged nothing")
	require.Equal(t, 1, logs.Count(slog.LevelInfo, "the broker is reachable again"))

	// The same failure with the broker reachable is in doubt, and charged
	// once a probe reaches the broker.
	mid, ok := o.await(stop)
	require.True(t, ok)
	require.Empty(t, o.mixed(mid, loading, victims))
	probe, ok = o.await(stop)
	require.True(t, ok)
	require.Equal(t, victims, o.reached(probe))
}

// testOutage is an outage tracker that probes without a backoff and logs
// to logs.
func testOutage(logs *logtest.Recorder) *outage {
	return newOutage(func(int) time.Duration { return 0 }, slog.New(logs),
		telemetry.NewRelay(noop.NewMeterProvider(), tracenoop.NewTracerProvider(), propagation.TraceContext{}))
}
