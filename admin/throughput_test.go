package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

// Throughput counts each consumer's done messages per bucket, the buckets
// aligned to whole multiples of their length, oldest first, and leaves out
// those done before the first bucket and those not done.
func TestThroughputCountsDonePerBucket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.add(t, "payments", "recent", 3, pgbox.InboxDone, "", time.Second)
	b.add(t, "payments", "earlier", 2, pgbox.InboxDone, "", 50*time.Minute)
	b.add(t, "payments", "old", 7, pgbox.InboxDone, "", 3*time.Hour)
	b.add(t, "payments", "dead", 4, pgbox.InboxDead, "timeout", 0)
	b.add(t, "shipping", "recent", 1, pgbox.InboxDone, "", 0)

	tp, err := b.adm.Throughput(ctx, admin.ThroughputOptions{Bucket: 10 * time.Minute})
	require.NoError(t, err)
	require.Equal(t, admin.Duration(10*time.Minute), tp.Bucket)
	require.Zero(t, tp.From.UnixNano()%int64(10*time.Minute), "buckets start at whole multiples of their length")
	require.Greater(t, tp.Until.Sub(tp.From), time.Hour, "the default window is the last hour, from the start of its bucket")
	require.Len(t, tp.Consumers, 2)
	p, s := tp.Consumers[0], tp.Consumers[1]
	require.Equal(t, "payments", p.Consumer)
	require.Len(t, p.Counts, 7, "an hour and the part of a bucket before it, in 10-minute buckets")
	var total int64
	for _, n := range p.Counts {
		total += n
	}
	require.EqualValues(t, 5, total, "the old and dead ones are left out")
	require.GreaterOrEqual(t, p.Counts[len(p.Counts)-1], int64(2), "a second ago is in the last bucket, or the one before")
	require.Equal(t, "shipping", s.Consumer)
	require.EqualValues(t, 1, s.Counts[len(s.Counts)-1])
}

// A caller that kept the buckets that ended asks for the ones after them:
// the same counts, fewer rows read.
func TestThroughputSince(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.add(t, "payments", "now", 2, pgbox.InboxDone, "", 0)
	b.add(t, "payments", "hour", 5, pgbox.InboxDone, "", 30*time.Minute)

	all, err := b.adm.Throughput(ctx, admin.ThroughputOptions{})
	require.NoError(t, err)
	require.Equal(t, admin.Duration(time.Minute), all.Bucket)
	recent, err := b.adm.Throughput(ctx, admin.ThroughputOptions{Since: all.Until.Add(-90 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, all.Until.Add(-90*time.Second).Truncate(time.Minute), recent.From)
	require.Len(t, recent.Consumers, 1)
	last := recent.Consumers[0].Counts
	require.EqualValues(t, 2, last[len(last)-1]+last[max(len(last)-2, 0)], "the 2 done now, in the last bucket or the one before")

	_, err = b.adm.Throughput(ctx, admin.ThroughputOptions{Bucket: 1500 * time.Millisecond})
	require.ErrorContains(t, err, "ThroughputOptions.Bucket")
}
