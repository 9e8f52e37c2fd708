// Package telemetrytest reads what pgbox's instruments recorded, for tests.
package telemetrytest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Sums reads the int64 sums of the metric name from reader, by the value
// of attribute key ("" for a sum without attributes).
func Sums(tb testing.TB, reader *sdkmetric.ManualReader, name, key string) map[string]int64 {
	tb.Helper()
	out := map[string]int64{}
	for _, dp := range points(tb, reader, name, func(d metricdata.Aggregation) []metricdata.DataPoint[int64] {
		return d.(metricdata.Sum[int64]).DataPoints
	}) {
		v, _ := dp.Attributes.Value(attribute.Key(key))
		out[v.AsString()] += dp.Value
	}
	return out
}

// Gauges reads the last values of the int64 gauge name from reader, by
// the value of attribute key ("" for a gauge without it). A gauge never
// recorded is absent.
func Gauges(tb testing.TB, reader *sdkmetric.ManualReader, name, key string) map[string]int64 {
	tb.Helper()
	out := map[string]int64{}
	for _, dp := range points(tb, reader, name, func(d metricdata.Aggregation) []metricdata.DataPoint[int64] {
		return d.(metricdata.Gauge[int64]).DataPoints
	}) {
		v, _ := dp.Attributes.Value(attribute.Key(key))
		out[v.AsString()] = dp.Value
	}
	return out
}

// points collects reader and returns the data points of the metric name,
// which of picks out of its aggregation.
func points(tb testing.TB, reader *sdkmetric.ManualReader, name string, of func(metricdata.Aggregation) []metricdata.DataPoint[int64]) []metricdata.DataPoint[int64] {
	tb.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(tb, reader.Collect(context.Background(), &rm))
	var out []metricdata.DataPoint[int64]
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				out = append(out, of(m.Data)...)
			}
		}
	}
	return out
}
