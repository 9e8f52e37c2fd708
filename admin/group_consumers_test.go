package admin

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// GroupConsumers names the consumer a fingerprint belongs to, drained
// groups included, and reads the group through its index, never the done
// messages.
func TestGroupConsumers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	_, err := pool.Exec(ctx, ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload,
		                               processed_at, last_error, bucket)
		SELECT CASE WHEN g % 2 = 0 THEN 'payments' ELSE 'refunds' END, 'm-' || g, 'ChargeCard',
		       CASE WHEN g % 1000 = 0 THEN 'dead' ELSE 'done' END, 1, 3,
		       '\x00'::bytea, ''::bytea, now(),
		       CASE WHEN g % 1000 = 0 OR g = 1001 THEN 'gateway timeout after ' || g || 's' END, /* schema */inbox_bucket('m-' || g)
		FROM generate_series(1, 30000) AS g`, schema))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, ident.Render("ANALYZE /* schema */inbox", schema))
	require.NoError(t, err)
	adm, err := New(pool, Config{Schema: schema})
	require.NoError(t, err)

	groups, err := adm.Failures(ctx, FailuresOptions{})
	require.NoError(t, err)
	require.Len(t, groups, 1, "the dead messages are payments' (even g)")
	require.Equal(t, "payments", groups[0].Consumer)
	owners, err := adm.GroupConsumers(ctx, groups[0].Fingerprint)
	require.NoError(t, err)
	require.Equal(t, []string{"payments"}, owners)

	var drained string // refunds' m-1001 failed, then succeeded: its group is drained, and still refunds'
	require.NoError(t, pool.QueryRow(ctx, ident.Render("SELECT "+fingerprintSQL+" FROM /* schema */inbox AS i WHERE i.message_id = 'm-1001'", schema)).Scan(&drained))
	owners, err = adm.GroupConsumers(ctx, drained)
	require.NoError(t, err)
	require.Equal(t, []string{"refunds"}, owners)

	owners, err = adm.GroupConsumers(ctx, "0123456789ab")
	require.NoError(t, err)
	require.Empty(t, owners)
	_, err = adm.GroupConsumers(ctx, "nope")
	require.ErrorContains(t, err, "not a fingerprint")

	requireNoScanOfRows(t, pool, schema, pgtest.Plan(t, pool, ident.Render(groupConsumersSQL, schema), drained), "group consumers")
}
