package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/metric"
)

// Inbox counts what an inbox's Receive calls did.
type Inbox struct {
	attrs      metric.MeasurementOption
	conflicts  metric.Int64Counter
	duplicates metric.Int64Counter
	received   metric.Int64Counter
}

// NewInbox returns the instruments of consumer's inbox.
func NewInbox(mp metric.MeterProvider, consumer string) *Inbox {
	m := Meter(mp)
	return &Inbox{
		attrs: metric.WithAttributes(AttrConsumer.String(consumer)),
		conflicts: must(m.Int64Counter(InboxConflicts, metric.WithUnit("{message}"),
			metric.WithDescription("Redeliveries that reused a stored message id with a different payload: recorded, never applied."))),
		duplicates: must(m.Int64Counter(InboxDuplicates, metric.WithUnit("{message}"),
			metric.WithDescription("Redeliveries of a message the consumer already held: absorbed by the inbox."))),
		received: must(m.Int64Counter(InboxReceived, metric.WithUnit("{message}"),
			metric.WithDescription("Messages stored in the inbox for the first time."))),
	}
}

// Count adds one Receive's outcomes.
func (i *Inbox) Count(ctx context.Context, accepted, duplicates, conflicts int) {
	if accepted > 0 {
		i.received.Add(ctx, int64(accepted), i.attrs)
	}
	if duplicates > 0 {
		i.duplicates.Add(ctx, int64(duplicates), i.attrs)
	}
	if conflicts > 0 {
		i.conflicts.Add(ctx, int64(conflicts), i.attrs)
	}
}
