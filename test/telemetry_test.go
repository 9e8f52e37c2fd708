package test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgbox/pgbox/dispatcher"
	"github.com/pgbox/pgbox/inbox"
	"github.com/pgbox/pgbox/internal/pgtest"
	"github.com/pgbox/pgbox/outbox"
	"github.com/pgbox/pgbox/pgboxtest"
	"github.com/pgbox/pgbox/relay"
)

// metrics is one collection, flattened: a metric's value per attribute
// set (written "k=v,k=v"); for histograms, the count.
type metrics map[string]map[string]float64

func collect(t *testing.T, reader *sdkmetric.ManualReader) metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := metrics{}
	key := func(s attribute.Set) string {
		k := ""
		for i, kv := range s.ToSlice() {
			if i > 0 {
				k += ","
			}
			k += string(kv.Key) + "=" + kv.Value.String()
		}
		return k
	}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, "github.com/pgbox/pgbox", sm.Scope.Name)
		for _, m := range sm.Metrics {
			points := map[string]float64{}
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					points[key(dp.Attributes)] = float64(dp.Value)
				}
			case metricdata.Gauge[int64]:
				for _, dp := range data.DataPoints {
					points[key(dp.Attributes)] = float64(dp.Value)
				}
			case metricdata.Gauge[float64]:
				for _, dp := range data.DataPoints {
					points[key(dp.Attributes)] = dp.Value
				}
			case metricdata.Histogram[float64]:
				for _, dp := range data.DataPoints {
					points[key(dp.Attributes)] = float64(dp.Count)
				}
			default:
				t.Fatalf("metric %s has unexpected data %T", m.Name, m.Data)
			}
			if len(points) > 0 {
				out[m.Name] = points
			}
		}
	}
	return out
}

// A known run, end to end: a producer writes 10 orders in one traced
// request; the relay publishes them one per call, and the first call fails
// and its retry succeeds; the consumer receives the 10 messages plus 2
// duplicates and 1 conflicting redelivery; one order is poison and fails
// its 3 attempts. Every counter, histogram and span must say exactly that,
// and the spans must form one trace: request → publish → handle.
func TestTelemetryOfAKnownRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)

	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tracers := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))

	// The producer: one request, ten orders.
	box, err := outbox.New(pool, outbox.Config{Schema: schema})
	require.NoError(t, err)
	reqCtx, request := tracers.Tracer("test").Start(ctx, "POST /checkout")
	tx, err := pool.Begin(reqCtx)
	require.NoError(t, err)
	for i := 1; i <= 10; i++ {
		payload := fmt.Sprintf(`{"order":%d}`, i)
		if i == 7 {
			payload = "poison"
		}
		_, err := box.Write(reqCtx, tx, outbox.Message{Topic: "orders", EventType: "OrderPlaced", Payload: []byte(payload)})
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(reqCtx))
	request.End()

	// The relay: the broker refuses the first publish.
	var (
		mu        sync.Mutex
		calls     int
		published []*message.Message
	)
	r, err := relay.New(pool, relay.Config{
		MeterProvider: meters,
		PollInterval:  10 * time.Millisecond,
		Publisher: publishFunc(func(topic string, msgs ...*message.Message) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls == 1 {
				return errors.New("broker unavailable")
			}
			published = append(published, msgs...)
			return nil
		}),
		RetryBackoffFunc: func(int) time.Duration { return time.Millisecond },
		Schema:           schema,
		TracerProvider:   tracers,
	})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	require.NoError(t, pgboxtest.WaitDrained(waitCtx(t), pool, schema))
	require.NoError(t, r.Stop(ctx))
	mu.Lock()
	require.Len(t, published, 10)
	require.Equal(t, 11, calls, "one message per call, the first refused once")
	mu.Unlock()

	// The consumer: every message, two of them twice, and one conflict.
	payments, err := inbox.New(pool, inbox.Config{Consumer: "payments", MaxAttempts: 3, MeterProvider: meters, Schema: schema})
	require.NoError(t, err)
	deliver := func(m *message.Message, payload []byte) (inbox.Outcome, error) {
		return payments.Receive(ctx, inbox.Message{ID: m.UUID, EventType: m.Metadata.Get("event_type"), Metadata: m.Metadata, Payload: payload})
	}
	for _, m := range published {
		outcome, err := deliver(m, m.Payload)
		require.NoError(t, err)
		require.Equal(t, inbox.Accepted, outcome)
	}
	for _, m := range published[:2] {
		outcome, err := deliver(m, m.Payload)
		require.NoError(t, err)
		require.Equal(t, inbox.Duplicate, outcome)
	}
	outcome, err := deliver(published[2], []byte("changed"))
	require.ErrorIs(t, err, inbox.ErrPayloadConflict)
	require.Equal(t, inbox.Conflict, outcome)

	d, err := dispatcher.New(pool, dispatcher.Config{
		Inbox: payments,
		Handlers: map[string]dispatcher.Handler{"OrderPlaced": dispatcher.InTx(func(ctx context.Context, _ pgx.Tx, m *dispatcher.Message) error {
			if string(m.Payload) == "poison" {
				return errors.New("payload is not an order")
			}
			return nil
		})},
		MeterProvider:    meters,
		PollInterval:     10 * time.Millisecond,
		RetryBackoffFunc: func(int) time.Duration { return time.Millisecond },
		TracerProvider:   tracers,
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	require.NoError(t, pgboxtest.WaitDrained(waitCtx(t), pool, schema))

	got := collect(t, reader)
	consumer := "pgbox.consumer=payments"
	typed := "pgbox.consumer=payments,pgbox.event_type=OrderPlaced"
	require.Equal(t, map[string]float64{consumer: 10}, got["pgbox.inbox.received"])
	require.Equal(t, map[string]float64{consumer: 2}, got["pgbox.inbox.duplicates"])
	require.Equal(t, map[string]float64{consumer: 1}, got["pgbox.inbox.conflicts"])
	require.Equal(t, map[string]float64{typed: 9}, got["pgbox.dispatcher.processed"])
	require.Equal(t, map[string]float64{typed: 3}, got["pgbox.dispatcher.failed"])
	require.Equal(t, map[string]float64{typed: 1}, got["pgbox.dispatcher.dead"])
	require.Equal(t, map[string]float64{typed + ",pgbox.outcome=ok": 9, typed + ",pgbox.outcome=error": 3},
		got["pgbox.dispatcher.handler.duration"], "one duration per attempt")
	require.Equal(t, map[string]float64{"pgbox.topic=orders": 10}, got["pgbox.relay.published"])
	require.Equal(t, map[string]float64{"pgbox.topic=orders": 1}, got["pgbox.relay.publish.failures"])
	require.Equal(t, map[string]float64{consumer: 0}, got["pgbox.inbox.backlog"], "drained")
	require.Equal(t, map[string]float64{consumer: 0}, got["pgbox.inbox.oldest_pending_age"])
	require.NotContains(t, got, "pgbox.relay.lag", "a stopped relay reports no gauges")

	require.NoError(t, d.Stop(ctx))
	require.NotContains(t, collect(t, reader), "pgbox.inbox.backlog", "a stopped dispatcher reports no gauges")

	// The spans: one trace, request → publish → handle.
	traceID := request.SpanContext().TraceID()
	sends := map[trace.SpanID]bool{} // successful publishes
	var failedSends, handled, handlerErrors int
	for _, s := range spans.Ended() {
		switch s.Name() {
		case "send orders":
			require.Equal(t, trace.SpanKindProducer, s.SpanKind())
			require.Equal(t, traceID, s.SpanContext().TraceID())
			require.Equal(t, request.SpanContext().SpanID(), s.Parent().SpanID(), "a publish continues the producer's request")
			if s.Status().Code == codes.Error {
				failedSends++
				require.Equal(t, "broker unavailable", s.Status().Description)
			} else {
				sends[s.SpanContext().SpanID()] = true
			}
		case "process OrderPlaced":
			handled++
			require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
			require.Equal(t, traceID, s.SpanContext().TraceID())
			require.True(t, sends[s.Parent().SpanID()], "a handler continues the publish that delivered its message")
			if s.Status().Code == codes.Error {
				handlerErrors++
				require.Equal(t, "payload is not an order", s.Status().Description)
			}
		}
	}
	require.Len(t, sends, 10)
	require.Equal(t, 1, failedSends)
	require.Equal(t, 12, handled, "9 successes and 3 attempts of the poison")
	require.Equal(t, 3, handlerErrors)
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
