package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The example runs end to end and its Prometheus endpoint shows pgbox's
// metrics with the values of the run: 12 orders, each delivered twice, one
// poison.
func TestObservabilityExample(t *testing.T) {
	t.Parallel()
	schema := pgtest.EmptySchema(t)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), pgtest.URL(t), "127.0.0.1:0", 12, schema, true, &out), out.String())
	got := out.String()
	require.Contains(t, got, `200 OK`, "healthy")
	require.Contains(t, got, `"status": "ok"`)
	for _, want := range []string{
		`pgbox_inbox_received_total{otel_scope_name="github.com/pgbox/pgbox"`,
		`pgbox_dispatcher_handler_duration_seconds_bucket{`,
		`pgbox_relay_lag_seconds{`,
		`pgbox_inbox_backlog{`,
	} {
		require.Contains(t, got, want)
	}
	require.Regexp(t, `pgbox_inbox_received_total\{[^}]*pgbox_consumer="payments"[^}]*\} 12\n`, got)
	require.Regexp(t, `pgbox_inbox_duplicates_total\{[^}]*\} 12\n`, got)
	require.Regexp(t, `pgbox_dispatcher_processed_total\{[^}]*pgbox_event_type="OrderPlaced"[^}]*\} 11\n`, got)
	require.Regexp(t, `pgbox_dispatcher_dead_total\{[^}]*\} 1\n`, got)
	require.Regexp(t, `pgbox_dispatcher_failed_total\{[^}]*\} 3\n`, got)
	require.Regexp(t, `pgbox_relay_published_total\{[^}]*pgbox_topic="orders"[^}]*\} 12\n`, got)
}
