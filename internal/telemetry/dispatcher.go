package telemetry

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgbox/pgbox"
)

// Dispatcher holds a dispatcher's instruments and tracer.
type Dispatcher struct {
	consumer    string
	dead        metric.Int64Counter
	duration    metric.Float64Histogram
	failed      metric.Int64Counter
	meter       metric.Meter
	paused      metric.Int64Gauge
	processed   metric.Int64Counter
	tracer      trace.Tracer
	unavailable metric.Int64Gauge

	mu    sync.Mutex
	attrs map[string]metric.MeasurementOption // by event type
}

// NewDispatcher returns the instruments of consumer's dispatcher.
func NewDispatcher(mp metric.MeterProvider, tp trace.TracerProvider, consumer string) *Dispatcher {
	m := Meter(mp)
	return &Dispatcher{
		attrs:    map[string]metric.MeasurementOption{},
		consumer: consumer,
		dead: must(m.Int64Counter(DispatcherDead, metric.WithUnit("{message}"),
			metric.WithDescription("Messages that became dead: out of attempts, a permanent error, or their last attempt's lease expired."))),
		duration: must(m.Float64Histogram(DispatcherDuration, metric.WithUnit("s"),
			metric.WithDescription("How long handlers ran, per attempt."),
			metric.WithExplicitBucketBoundaries(DurationBuckets...))),
		failed: must(m.Int64Counter(DispatcherFailed, metric.WithUnit("{attempt}"),
			metric.WithDescription("Failed attempts: handler errors, panics, timeouts, unknown event types and lost workers (a dead message's last attempt included)."))),
		meter: m,
		paused: must(m.Int64Gauge(DispatcherPaused, metric.WithUnit("1"),
			metric.WithDescription("1 while an operator's pause keeps the dispatcher from claiming the consumer's messages of an event type (event_type \"\" for the whole consumer), 0 once resumed."))),
		processed: must(m.Int64Counter(DispatcherProcessed, metric.WithUnit("{message}"),
			metric.WithDescription("Messages handled and marked done, counted once their done mark committed."))),
		tracer: Tracer(tp),
		unavailable: must(m.Int64Gauge(DispatcherUnavailable, metric.WithUnit("1"),
			metric.WithDescription("1 while the dispatcher claims no message of an event type because its handler reported its dependency unavailable (one is tried as a probe after each backoff), 0 once a probe answers."))),
	}
}

// of returns the measurement attributes of eventType, with the handler's
// outcome if one is given. They are built once per pair and kept, so that
// recording a measurement allocates nothing.
func (d *Dispatcher) of(eventType, outcome string) metric.MeasurementOption {
	key := eventType + "\x00" + outcome
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.attrs[key]
	if !ok {
		kvs := []attribute.KeyValue{AttrConsumer.String(d.consumer), AttrEventType.String(eventType)}
		if outcome != "" {
			kvs = append(kvs, AttrOutcome.String(outcome))
		}
		a = metric.WithAttributeSet(attribute.NewSet(kvs...))
		if len(d.attrs) < 1000 { // event types are few; do not grow without bound on junk
			d.attrs[key] = a
		}
	}
	return a
}

// Handling starts the span of one handler call, continuing the trace that
// ctx carries (the producer's, from the message's metadata), and returns
// the span's context and a function that ends it and records the handler's
// duration. Call end with the handler's error, once.
func (d *Dispatcher) Handling(ctx context.Context, id, eventType string, attempt int) (_ context.Context, end func(error)) {
	start := time.Now()
	ctx, span := d.tracer.Start(ctx, "process "+eventType, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() { // building attributes costs: not for a span nobody keeps
		span.SetAttributes(
			attrMessagingSystem.String("pgbox"),
			attrMessagingOperationType.String("process"),
			attrMessagingOperationName.String("process"),
			attrMessagingConsumerGroup.String(d.consumer),
			attrMessagingMessageID.String(id),
			AttrConsumer.String(d.consumer),
			AttrEventType.String(eventType),
			AttrAttempt.Int(attempt),
		)
	}
	return ctx, func(err error) {
		outcome := "ok"
		if err != nil {
			outcome = "error"
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		d.duration.Record(ctx, time.Since(start).Seconds(), d.of(eventType, outcome))
		span.End()
	}
}

// Outcome counts one recorded outcome: status is what completeSQL wrote
// (pgbox.InboxDone, InboxPending or InboxDead); failed says whether the
// attempt failed (rather than being released or snoozed).
func (d *Dispatcher) Outcome(ctx context.Context, eventType string, status pgbox.InboxStatus, failed bool) {
	attrs := d.of(eventType, "")
	if failed {
		d.failed.Add(ctx, 1, attrs)
	}
	switch status {
	case pgbox.InboxDone:
		d.processed.Add(ctx, 1, attrs)
	case pgbox.InboxDead:
		d.dead.Add(ctx, 1, attrs)
	}
}

// Paused records whether an operator's pause of eventType ("" for the
// whole consumer) holds the dispatcher's claims back.
func (d *Dispatcher) Paused(eventType string, paused bool) {
	d.paused.Record(context.Background(), b2i(paused), d.of(eventType, ""))
}

// Unavailable records whether eventType's dependency is down.
func (d *Dispatcher) Unavailable(eventType string, down bool) {
	d.unavailable.Record(context.Background(), b2i(down), d.of(eventType, ""))
}

// WatchBacklog registers the consumer's backlog gauges, read from db at
// each collection, and returns a function that unregisters them.
func (d *Dispatcher) WatchBacklog(db Querier, schema string) (stop func()) {
	backlog := must(d.meter.Int64ObservableGauge(InboxBacklog, metric.WithUnit("{message}"),
		metric.WithDescription("Pending messages (due or backing off), per consumer.")))
	oldest := must(d.meter.Float64ObservableGauge(InboxOldestPendingAge, metric.WithUnit("s"),
		metric.WithDescription("How long the oldest claimable pending message has waited since it became due, per consumer; 0 when none waits.")))
	q := render(inboxBacklogSQL, schema)
	attrs := metric.WithAttributeSet(attribute.NewSet(AttrConsumer.String(d.consumer)))
	reg, err := d.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		n, age, err := queryBacklog(ctx, db, q, d.consumer)
		if err != nil {
			return err
		}
		o.ObserveInt64(backlog, n, attrs)
		o.ObserveFloat64(oldest, age, attrs)
		return nil
	}, backlog, oldest)
	return unregister(reg, err)
}
