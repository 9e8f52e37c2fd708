package admin_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/admin"
)

// OutboxStats counts what Stats counts of the outbox.
func TestOutboxStatsIsStatsOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.exec(t, `INSERT INTO /* schema */outbox (id, topic, event_type, status, attempts, payload, metadata, created_at, bucket)
		SELECT r.id, 'orders', 'OrderPaid', r.s, 0, '', '{}', now() - interval '5 minutes', /* schema */outbox_bucket(r.id)
		FROM (SELECT gen_random_uuid() AS id, s FROM unnest(ARRAY['pending', 'pending', 'dead', 'published']) AS s) AS r`)
	st, err := b.adm.Stats(ctx, admin.StatsOptions{})
	require.NoError(t, err)
	ob, err := b.adm.OutboxStats(ctx, admin.StatsOptions{})
	require.NoError(t, err)
	require.Equal(t, []int64{2, 0, 1, 1}, []int64{ob.Pending, ob.Running, ob.Dead, ob.Published})
	require.Equal(t, st.Outbox.Pending, ob.Pending)
	require.NotNil(t, ob.OldestUnpublished)
}
