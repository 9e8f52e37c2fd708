package relay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/partition"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// The claim, planned once for every execution (the generic plan a
// prepared statement ends up with), reads no partition whole and finds
// each claimed row again in its own partition only: on an outbox that
// keeps 100,000 published rows of an old day, the old day's primary key is
// never probed to claim the pending ones.
func TestClaimReadsOnlyTheClaimedRowsPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	sql := func(q string) string { return ident.Render(q, schema) }
	var now time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT now()").Scan(&now))
	old := partition.DayOf(now) - 3
	require.NoError(t, partition.CreateDay(ctx, pool, schema, partition.Outbox, old, time.Second))
	_, err := pool.Exec(ctx, sql(`
		INSERT INTO /* schema */outbox (id, topic, event_type, payload, status, published_at, bucket)
		SELECT `+partition.IDSQL("$1::bigint + g", "g")+`::uuid, 't', 'E', '', 'published', now(), $2
		FROM generate_series(1, 100000) AS g`), old.Time().UnixMilli(), int32(old))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, sql(`
		INSERT INTO /* schema */outbox (id, topic, event_type, payload, bucket)
		SELECT m.id, 't', 'E', '', /* schema */outbox_bucket(m.id) FROM unnest($1::uuid[]) AS m(id)`),
		[]string{partition.IDAt(now).String(), partition.IDAt(now).String()})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, sql("ANALYZE /* schema */outbox"))
	require.NoError(t, err)

	plan := pgtest.GenericPlan(t, pool, sql(claimSQL), "100, 1, 60000, 'lost', 0")
	require.NotContains(t, plan, "Hash Join", plan)
	require.Contains(t, plan, "Update on outbox o (actual rows=2 loops=1)", plan)
	pgtest.RequireNotProbed(t, plan, "outbox_d"+old.String())
}
