package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Senders that cannot keep up would time a lighter load than the case
// claims, so paced refuses to report them: 16 senders taking 100 ms a
// message hold at most 160 of the 1,000 messages a second asked for.
func TestPacedFailsWhenTheSendersFallBehind(t *testing.T) {
	t.Parallel()
	slow := func(ctx context.Context, _ int64) error { return sleep(ctx, 100*time.Millisecond) }
	n, held, err := paced(context.Background(), 1000, 300*time.Millisecond, 100, slow)
	require.ErrorContains(t, err, "the senders held only")
	require.ErrorContains(t, err, "lower -rate")
	require.Less(t, held, 500.0)
	require.EqualValues(t, 200, n, "every message from the 100th on is sent, late")
}
