package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Maintenance counts what the maintenance jobs did.
type Maintenance struct {
	deleted  metric.Int64Counter
	replayed metric.Int64Counter
}

// NewMaintenance returns the maintenance jobs' instruments.
func NewMaintenance(mp metric.MeterProvider) *Maintenance {
	m := Meter(mp)
	return &Maintenance{
		deleted: must(m.Int64Counter(MaintenanceDeleted, metric.WithUnit("{row}"),
			metric.WithDescription("Rows the retention job deleted, per table."))),
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

// Replayed counts n messages replayed by scheduled replays.
func (m *Maintenance) Replayed(ctx context.Context, n int64) {
	if n > 0 {
		m.replayed.Add(ctx, n)
	}
}
