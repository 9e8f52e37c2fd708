package admin_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
)

// CountByConsumer counts what Count counts, per consumer.
func TestCountByConsumer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.mixed(t)
	for _, f := range []admin.Filter{
		{}, {ReplayableOnly: true}, {Statuses: []pgbox.InboxStatus{pgbox.InboxDead}}, {Consumer: "shipping"}, {Consumer: "nobody"},
	} {
		per, err := b.adm.CountByConsumer(ctx, f)
		require.NoError(t, err)
		var sum int64
		for consumer, n := range per {
			require.Positive(t, n, consumer)
			sum += n
			one, err := b.adm.Count(ctx, func() admin.Filter { g := f; g.Consumer = consumer; return g }())
			require.NoError(t, err)
			require.Equal(t, one, n, "%+v %s", f, consumer)
		}
		total, err := b.adm.Count(ctx, f)
		require.NoError(t, err)
		require.Equal(t, total, sum, "%+v", f)
	}
	per, err := b.adm.CountByConsumer(ctx, admin.Filter{Statuses: []pgbox.InboxStatus{pgbox.InboxDead}})
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"payments": 25, "shipping": 4}, per)
}
