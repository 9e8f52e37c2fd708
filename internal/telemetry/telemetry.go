// Package telemetry holds pgbox's OpenTelemetry instruments: the metric
// names, units and attributes, and the spans, that the inbox, the
// dispatcher, the relay and the maintenance jobs emit. Keeping them in one
// place keeps the names consistent and documented (docs/operations.md lists
// them).
//
// Every component takes a metric.MeterProvider and a trace.TracerProvider
// from its Config, defaulting to OpenTelemetry's global ones. Until a
// service installs providers, those are no-ops: counting costs a call that
// does nothing, spans are non-recording, and the observable gauges' queries
// never run, because nothing collects them.
package telemetry

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of every pgbox meter and tracer.
const ScopeName = "github.com/pgbox/pgbox"

// Attribute keys pgbox puts on its metrics and spans.
const (
	// AttrConsumer is the inbox consumer.
	AttrConsumer = attribute.Key("pgbox.consumer")
	// AttrEventType is the message's event type.
	AttrEventType = attribute.Key("pgbox.event_type")
	// AttrOutcome is a handler's outcome: "ok" or "error".
	AttrOutcome = attribute.Key("pgbox.outcome")
	// AttrTable is the table a maintenance job deleted from or changed
	// the partitions of.
	AttrTable = attribute.Key("pgbox.table")
	// AttrChange is what a maintenance job did to a partition: created,
	// dropped or postponed.
	AttrChange = attribute.Key("pgbox.change")
	// AttrTopic is the topic the relay published to.
	AttrTopic = attribute.Key("pgbox.topic")
	// AttrAttempt is the attempt's number, on a handler's span.
	AttrAttempt = attribute.Key("pgbox.attempt")
	// AttrComponent is the component a work loop's metric is about:
	// "dispatcher" or "relay".
	AttrComponent = attribute.Key("pgbox.component")
)

// OpenTelemetry messaging semantic-convention keys used on spans.
const (
	attrMessagingSystem        = attribute.Key("messaging.system")
	attrMessagingOperationType = attribute.Key("messaging.operation.type")
	attrMessagingOperationName = attribute.Key("messaging.operation.name")
	attrMessagingDestination   = attribute.Key("messaging.destination.name")
	attrMessagingConsumerGroup = attribute.Key("messaging.consumer.group.name")
	attrMessagingMessageID     = attribute.Key("messaging.message.id")
	attrMessagingBatchCount    = attribute.Key("messaging.batch.message_count")
)

// Metric names.
const (
	InboxReceived         = "pgbox.inbox.received"
	InboxDuplicates       = "pgbox.inbox.duplicates"
	InboxConflicts        = "pgbox.inbox.conflicts"
	InboxBacklog          = "pgbox.inbox.backlog"
	InboxOldestPendingAge = "pgbox.inbox.oldest_pending_age"
	DispatcherProcessed   = "pgbox.dispatcher.processed"
	DispatcherFailed      = "pgbox.dispatcher.failed"
	DispatcherDead        = "pgbox.dispatcher.dead"
	DispatcherDuration    = "pgbox.dispatcher.handler.duration"
	DispatcherPaused      = "pgbox.dispatcher.paused"
	DispatcherUnavailable = "pgbox.dispatcher.unavailable"
	RelayPublished        = "pgbox.relay.published"
	RelayPublishFailures  = "pgbox.relay.publish.failures"
	RelayDead             = "pgbox.relay.dead"
	RelayLag              = "pgbox.relay.lag"
	RelayBrokerDown       = "pgbox.relay.broker_unreachable"
	RelayTopicsStuck      = "pgbox.relay.topics_stuck"
	OutboxBacklog         = "pgbox.outbox.backlog"
	MaintenanceDeleted    = "pgbox.maintenance.deleted"
	MaintenanceReplayed   = "pgbox.maintenance.replayed"
	MaintenancePartitions = "pgbox.maintenance.partitions"
	NotificationsArriving = "pgbox.notifications.arriving"
	ClaimingPaused        = "pgbox.claiming.paused"
	Stalled               = "pgbox.stalled"
)

// DurationBuckets are the handler duration histogram's bucket bounds, in
// seconds: from a millisecond (a quick in-transaction write) to a minute
// (the default handler timeout).
var DurationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Meter returns pgbox's meter from mp, or from the global provider when mp
// is nil.
func Meter(mp metric.MeterProvider) metric.Meter {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	return mp.Meter(ScopeName)
}

// Tracer returns pgbox's tracer from tp, or from the global provider when
// tp is nil.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

// must reports an instrument's creation error to OpenTelemetry's error
// handler and returns the instrument, which is usable either way.
func must[T any](instrument T, err error) T {
	if err != nil {
		otel.Handle(err)
	}
	return instrument
}
