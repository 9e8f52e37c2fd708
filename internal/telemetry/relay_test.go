package telemetry

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"
)

// producerContext is a producer's trace context, as outbox.Write puts it
// in a message's metadata.
const producerContext = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// publish runs one Publishing call for a message carrying the producer's
// trace context, and returns the context the message leaves with.
func publish(r *Relay) string {
	m := message.NewMessage("m-1", nil)
	m.Metadata.Set("traceparent", producerContext)
	r.Publishing("orders", []*message.Message{m})(func(int) error { return nil })
	return m.Metadata.Get("traceparent")
}

// A relay that takes the global TracerProvider makes no spans while none
// is installed (the message keeps its producer's trace context, as a no-op
// span would leave it), and a span per message, the message's new parent,
// once one is: the provider may be installed after the relay is made. Not
// parallel: it installs a global provider, which no other test of the
// package reads.
func TestRelaySpansFollowTheGlobalProvider(t *testing.T) {
	require.Equal(t, producerContext, publish(NewRelay(nil, noop.NewTracerProvider(), propagation.TraceContext{})),
		"a no-op provider's relay changed the message's trace context")

	r := NewRelay(nil, nil, propagation.TraceContext{})
	require.Equal(t, producerContext, publish(r), "no provider is installed, yet the message's trace context changed")

	spans := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	got := publish(r)
	require.Len(t, spans.Ended(), 1, "the installed provider got no span")
	span := spans.Ended()[0]
	require.Equal(t, "send orders", span.Name())
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", span.Parent().TraceID().String(), "the span does not continue the producer's trace")
	require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-"+span.SpanContext().SpanID().String()+"-01", got,
		"the message does not carry the publish span's context")
}
