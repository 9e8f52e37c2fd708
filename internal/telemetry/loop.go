package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Loop holds the instruments of a work loop: a dispatcher's or the relay's.
// A nil *Loop records nothing.
type Loop struct {
	arriving metric.Int64Gauge
	attrs    metric.MeasurementOption
	paused   metric.Int64Gauge
	stalled  metric.Int64Gauge
}

// NewLoop returns a work loop's instruments; attrs tell the loop apart
// (AttrComponent, and AttrConsumer for a dispatcher).
func NewLoop(mp metric.MeterProvider, attrs ...attribute.KeyValue) *Loop {
	m := Meter(mp)
	return &Loop{
		arriving: must(m.Int64Gauge(NotificationsArriving, metric.WithUnit("1"),
			metric.WithDescription("1 when the listener's self-check notification came back, 0 when it did not: new work then waits for the next poll (set ListenConnConfig to a direct connection, or PollOnly). Absent while unchecked and in poll-only mode."))),
		attrs: metric.WithAttributeSet(attribute.NewSet(attrs...)),
		paused: must(m.Int64Gauge(ClaimingPaused, metric.WithUnit("1"),
			metric.WithDescription("1 while claiming is paused because outcomes cannot be recorded in the database, 0 otherwise."))),
		stalled: must(m.Int64Gauge(Stalled, metric.WithUnit("1"),
			metric.WithDescription("1 while rows have waited the stall timeout and the loop has finished none of them (the log says what it waits on), 0 otherwise."))),
	}
}

// Arriving records the outcome of the listener's self-check.
func (l *Loop) Arriving(ok bool) {
	if l == nil {
		return
	}
	l.arriving.Record(context.Background(), b2i(ok), l.attrs)
}

// Paused records whether claiming is paused.
func (l *Loop) Paused(paused bool) {
	if l == nil {
		return
	}
	l.paused.Record(context.Background(), b2i(paused), l.attrs)
}

// Stalled records whether the loop is stalled.
func (l *Loop) Stalled(stalled bool) {
	if l == nil {
		return
	}
	l.stalled.Record(context.Background(), b2i(stalled), l.attrs)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
