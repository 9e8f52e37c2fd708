package telemetry

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Relay holds a relay's instruments and tracer.
type Relay struct {
	brokerDown  metric.Int64Gauge
	dead        metric.Int64Counter
	failures    metric.Int64Counter
	meter       metric.Meter
	propagator  propagation.TextMapPropagator
	published   metric.Int64Counter
	topicsStuck metric.Int64Gauge
	tracer      trace.Tracer
	// spans says whether the tracer's spans are more than no-ops.
	spans func() bool

	mu     sync.Mutex
	topics map[string]*topicTelemetry // by topic, up to maxTopicsKept
}

// topicTelemetry is what every publish to a topic shares: its span name
// and attributes, and its metrics' attribute set, made once.
type topicTelemetry struct {
	spanName string
	span     trace.SpanStartOption
	metric   metric.MeasurementOption
}

// maxTopicsKept bounds the topics whose telemetry a relay keeps made: a
// service that publishes to endlessly many topics makes each publish's
// anew rather than grow without bound.
const maxTopicsKept = 1000

// topic returns topic's shared telemetry.
func (r *Relay) topic(topic string) *topicTelemetry {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.topics[topic]; t != nil {
		return t
	}
	t := &topicTelemetry{
		spanName: "send " + topic,
		span: trace.WithAttributes(
			attrMessagingSystem.String("pgbox"),
			attrMessagingOperationType.String("send"),
			attrMessagingOperationName.String("send"),
			attrMessagingDestination.String(topic),
			AttrTopic.String(topic),
		),
		metric: metric.WithAttributeSet(attribute.NewSet(AttrTopic.String(topic))),
	}
	if len(r.topics) < maxTopicsKept {
		r.topics[topic] = t
	}
	return t
}

// NewRelay returns a relay's instruments. propagator reads the producer's
// trace context from each message's metadata and writes the publish span's
// in its place.
func NewRelay(mp metric.MeterProvider, tp trace.TracerProvider, propagator propagation.TextMapPropagator) *Relay {
	m := Meter(mp)
	return &Relay{
		brokerDown: must(m.Int64Gauge(RelayBrokerDown, metric.WithUnit("1"),
			metric.WithDescription("1 while the relay has paused publishing because the broker is unreachable (no row is charged an attempt meanwhile), 0 otherwise."))),
		dead: must(m.Int64Counter(RelayDead, metric.WithUnit("{message}"),
			metric.WithDescription("Outbox rows that became dead: never published unless retried (inboxctl outbox retry)."))),
		failures: must(m.Int64Counter(RelayPublishFailures, metric.WithUnit("{message}"),
			metric.WithDescription("Messages whose Publish call failed or got no answer within Config.PublishTimeout (each is retried after a backoff, or dead after Config.MaxAttempts; handed back in an outage)."))),
		meter:      m,
		propagator: propagator,
		published: must(m.Int64Counter(RelayPublished, metric.WithUnit("{message}"),
			metric.WithDescription("Messages the publisher accepted."))),
		topicsStuck: must(m.Int64Gauge(RelayTopicsStuck, metric.WithUnit("{topic}"),
			metric.WithDescription("Topics whose Publish calls have had no answer for 3 PublishTimeouts and have not returned: their rows wait, uncharged."))),
		tracer: Tracer(tp),
		spans:  spanning(tp),
		topics: map[string]*topicTelemetry{},
	}
}

// Publishing starts a span per message about to be published to topic.
// Each continues the trace in the message's metadata (the producer's, put
// there by outbox.Write) and replaces it with its own, so the consumer's
// handler becomes a child of the publish. While spans would be no-ops (no
// TracerProvider configured or installed, see spanning) it makes none: the
// messages carry their producer's trace context already. Call end once
// the call has returned, once, with errOf(i) giving message i's error
// (nil: published); it ends the spans and counts the messages.
func (r *Relay) Publishing(topic string, msgs []*message.Message) (end func(errOf func(i int) error)) {
	t := r.topic(topic)
	var spans []trace.Span
	if r.spans() {
		spans = make([]trace.Span, len(msgs))
		for i, m := range msgs {
			carrier := propagation.MapCarrier(m.Metadata)
			ctx := r.propagator.Extract(context.Background(), carrier)
			ctx, spans[i] = r.tracer.Start(ctx, t.spanName, trace.WithSpanKind(trace.SpanKindProducer), t.span,
				trace.WithAttributes(attrMessagingMessageID.String(m.UUID), attrMessagingBatchCount.Int(len(msgs))))
			r.propagator.Inject(ctx, carrier)
		}
	}
	return func(errOf func(i int) error) {
		var failed int64
		now := time.Now()
		for i := range msgs {
			err := errOf(i)
			if err != nil {
				failed++
			}
			if spans == nil {
				continue
			}
			if err != nil {
				spans[i].RecordError(err)
				spans[i].SetStatus(codes.Error, err.Error())
			}
			spans[i].End(trace.WithTimestamp(now))
		}
		ctx := context.Background()
		if failed > 0 {
			r.failures.Add(ctx, failed, t.metric)
		}
		if published := int64(len(msgs)) - failed; published > 0 {
			r.published.Add(ctx, published, t.metric)
		}
	}
}

// Unreachable records whether publishing is paused by a broker outage.
func (r *Relay) Unreachable(down bool) {
	r.brokerDown.Record(context.Background(), b2i(down))
}

// TopicsStuck records how many topics hang past the bound.
func (r *Relay) TopicsStuck(n int) {
	r.topicsStuck.Record(context.Background(), int64(n))
}

// Dead counts an outbox row of topic that became dead, once its dead mark
// committed.
func (r *Relay) Dead(topic string) {
	r.dead.Add(context.Background(), 1, metric.WithAttributeSet(attribute.NewSet(AttrTopic.String(topic))))
}

// WatchLag registers the outbox's gauges, read from db at each collection,
// and returns a function that unregisters them.
func (r *Relay) WatchLag(db Querier, schema string) (stop func()) {
	backlog := must(r.meter.Int64ObservableGauge(OutboxBacklog, metric.WithUnit("{message}"),
		metric.WithDescription("Outbox rows not yet published (pending, backing off, or being published).")))
	lag := must(r.meter.Float64ObservableGauge(RelayLag, metric.WithUnit("s"),
		metric.WithDescription("How long the oldest publishable outbox row has waited since it became due; 0 when none waits.")))
	q := render(outboxBacklogSQL, schema)
	reg, err := r.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		n, age, err := queryBacklog(ctx, db, q)
		if err != nil {
			return err
		}
		o.ObserveInt64(backlog, n)
		o.ObserveFloat64(lag, age)
		return nil
	}, backlog, lag)
	return unregister(reg, err)
}

// defaultTracerProvider is OpenTelemetry's global TracerProvider as it is
// before a service installs one (otel.SetTracerProvider): it makes no-op
// spans until then, and delegates to the installed one after.
var defaultTracerProvider = otel.GetTracerProvider()

// spanning returns a function that says whether tp's spans (the global
// provider's, when tp is nil) are more than no-ops, so that a hot path
// can skip making them: false for trace/noop's provider, and for the
// global one until a service installs its own.
func spanning(tp trace.TracerProvider) func() bool {
	switch tp.(type) {
	case nil:
		return func() bool { return otel.GetTracerProvider() != defaultTracerProvider }
	case noop.TracerProvider, *noop.TracerProvider:
		return func() bool { return false }
	}
	return func() bool { return true }
}
