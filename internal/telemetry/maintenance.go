package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Maintenance counts what the maintenance jobs did.
type Maintenance struct {
	deleted    metric.Int64Counter
	partitions metric.Int64Counter
	replayed   metric.Int64Counter
}

// NewMaintenance returns the maintenance jobs' instruments.
func NewMaintenance(mp metric.MeterProvider) *Maintenance {
	m := Meter(mp)
	return &Maintenance{
		deleted: must(m.Int64Counter(MaintenanceDeleted, metric.WithUnit("{row}"),
			metric.WithDescription("Rows the retention job deleted, per table."))),
		partitions: must(m.Int64Counter(MaintenancePartitions, metric.WithUnit("{partition}"),
			metric.WithDescription("Partitions the retention job created, dropped, or postponed a change to, per table."))),
		replayed: must(m.Int64Counter(MaintenanceReplayed, metric.WithUnit("{message}"),
			metric.WithDescription("Messages replayed by scheduled replays."))),
	}
}

// Deleted counts n rows deleted from table.
func (m *Maintenance) Deleted(ctx context.Context, table string, n int64) {
	if n > 0 {
		m.deleted.Add(ctx, n, metric.WithAttributeSet(attribute.NewSet(AttrTable.String(table))))
	}
}

// Partition counts one change to a partition of table: "created",
// "dropped" or "postponed".
func (m *Maintenance) Partition(ctx context.Context, table, change string) {
	m.partitions.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(AttrTable.String(table), AttrChange.String(change))))
}

// Replayed counts n messages replayed by scheduled replays.
func (m *Maintenance) Replayed(ctx context.Context, n int64) {
	if n > 0 {
		m.replayed.Add(ctx, n)
	}
}
