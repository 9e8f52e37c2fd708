package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

// Throughput counts each consumer's done messages per bucket of the
// window, oldest first, and leaves out those done before it and those not
// done.
func TestThroughputCountsDonePerBucket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.add(t, "payments", "recent", 3, pgbox.InboxDone, "", 30*time.Second)
	b.add(t, "payments", "earlier", 2, pgbox.InboxDone, "", 50*time.Minute)
	b.add(t, "payments", "old", 7, pgbox.InboxDone, "", 2*time.Hour)
	b.add(t, "payments", "dead", 4, pgbox.InboxDead, "timeout", 0)
	b.add(t, "shipping", "recent", 1, pgbox.InboxDone, "", 10*time.Minute)

	tp, err := b.adm.Throughput(ctx, admin.ThroughputOptions{Window: time.Hour, Buckets: 6})
	require.NoError(t, err)
	require.Equal(t, admin.Duration(10*time.Minute), tp.Bucket)
	require.Equal(t, time.Hour, tp.Until.Sub(tp.From))
	require.Len(t, tp.Consumers, 2)
	p := tp.Of("payments")
	require.Equal(t, []int64{2, 0, 0, 0, 0, 3}, p.Counts, "50 minutes ago in the first bucket, 30 seconds ago in the last")
	require.EqualValues(t, 5, p.Total)
	s := tp.Of("shipping")
	require.EqualValues(t, 1, s.Total)
	require.Equal(t, int64(1), s.Counts[4]+s.Counts[5], "10 minutes ago is at the edge of the last two buckets")

	none := tp.Of("refunds")
	require.Equal(t, make([]int64, 6), none.Counts, "a consumer that completed nothing has a bucket of zeros each")
}

// Throughput with no options counts the last hour by the minute, and an
// empty inbox gives its window and no consumer.
func TestThroughputDefaults(t *testing.T) {
	t.Parallel()
	b := setup(t, admin.Config{})
	tp, err := b.adm.Throughput(context.Background(), admin.ThroughputOptions{})
	require.NoError(t, err)
	require.Equal(t, admin.Duration(time.Minute), tp.Bucket)
	require.Equal(t, time.Hour, tp.Until.Sub(tp.From))
	require.Empty(t, tp.Consumers)
	require.Len(t, tp.Of("payments").Counts, 60)

	_, err = b.adm.Throughput(context.Background(), admin.ThroughputOptions{Window: -time.Second})
	require.ErrorContains(t, err, "ThroughputOptions.Window")
	_, err = b.adm.Throughput(context.Background(), admin.ThroughputOptions{Buckets: -1})
	require.ErrorContains(t, err, "ThroughputOptions.Buckets")
}
