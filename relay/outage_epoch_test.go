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
	o := newOutage(func(int) time.Duration { return 0 }, slog.New(logs),
		telemetry.NewRelay(noop.NewMeterProvider(), tracenoop.NewTracerProvider(), propagation.TraceContext{}))
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
