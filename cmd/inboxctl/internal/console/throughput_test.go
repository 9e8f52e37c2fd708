package console

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// The overview's chart reads the hour's done messages once, then only the
// last few minutes: a minute that has ended keeps its count.
func TestThroughputReadsOnlyNewMinutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, Config{})
	done := func(prefix string, n int, ago string) {
		b.exec(t, `INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, processed_at, bucket)
			SELECT 'refunds', $1 || g, 'Refund', 'done', 1, 3, '\x00', '', now() - $2::interval, /* schema */inbox_bucket($1 || g)
			FROM generate_series(1, $3::int) AS g`, prefix, ago, n)
	}
	done("early-", 3, "30 minutes")
	done("now-", 2, "0 seconds")
	tp := &throughput{}
	c, err := tp.read(ctx, b.adm)
	require.NoError(t, err)
	first := c.Of("refunds")
	require.EqualValues(t, 5, first.Total)
	require.Len(t, first.Counts, chartBuckets)
	require.GreaterOrEqual(t, first.Counts[chartBuckets-1]+first.Counts[chartBuckets-2], int64(2), "now is in the last minute, or the one before")

	done("late-", 4, "30 minutes") // not read again: that minute has ended
	done("again-", 1, "0 seconds")
	c, err = tp.read(ctx, b.adm)
	require.NoError(t, err)
	require.EqualValues(t, 6, c.Of("refunds").Total)
	require.EqualValues(t, 0, c.Of("nobody").Total)
}
