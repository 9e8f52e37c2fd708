package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Senders that cannot keep up start messages late, and paced says by how
// much: 16 senders taking 100 ms a message hold at most 160 of the 1,000
// messages a second asked for.
func TestPacedReportsTheRateTheSendersHeld(t *testing.T) {
	t.Parallel()
	slow := func(ctx context.Context, _ int64) error { return sleep(ctx, 100*time.Millisecond) }
	n, held, err := paced(context.Background(), 1000, 300*time.Millisecond, 100, slow)
	require.NoError(t, err)
	require.EqualValues(t, 200, n, "every message from the 100th on is sent, late")
	require.Less(t, held, 200.0)
	require.Greater(t, held, 0.0)

	// On time, the 25 messages from the 75th take a quarter of a second:
	// 100 a second, never more (none starts early), and well above the 25
	// a second of counting them over the whole run.
	fast := func(context.Context, int64) error { return nil }
	n, held, err = paced(context.Background(), 100, time.Second, 75, fast)
	require.NoError(t, err)
	require.EqualValues(t, 25, n)
	require.LessOrEqual(t, held, 100.0+1e-9)
	require.Greater(t, held, 40.0)

	_, _, err = paced(context.Background(), 100, 100*time.Millisecond, 75, fast)
	require.ErrorContains(t, err, "no message from the 75th on was sent")
}

// A latency case whose senders fell behind timed a lighter load than its
// setting says: its target is not met, however low its p99.
func TestLatencyTargetNeedsTheRateHeld(t *testing.T) {
	t.Parallel()
	report := func(held ...float64) *Report {
		return &Report{Results: []Result{{Scenario: "latency", Setting: "inbox, 1000/s", Systems: []SystemResult{{
			System:  "pgbox",
			Figures: map[string]Stats{"p99 ms": stats([]float64{10, 11, 12}), "sent/s": stats(held)},
		}}}}}
	}
	target := latencyTarget("p99 under 25 ms", "inbox, 1000/s", 1000, 25)

	figure, met, ok := target.check(report(1000, 999.8, 960))
	require.True(t, ok)
	require.True(t, met, figure)

	figure, met, ok = target.check(report(1000, 1000, 800))
	require.True(t, ok)
	require.False(t, met)
	require.Contains(t, figure, "its senders held only 800.0 of 1000 messages a second")

	_, _, ok = target.check(&Report{})
	require.False(t, ok, "a run without the case does not judge it")
}
