package dispatcher

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/partition"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// The claim, planned once for every execution (the generic plan a
// prepared statement ends up with), reads no partition whole and finds
// each claimed row again in its own partition only: on an inbox that
// keeps 100,000 done messages of an old day, the old day's primary key is
// never probed to mark the pending ones done.
func TestClaimReadsOnlyTheClaimedRowsPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	sql := func(q string) string { return ident.Render(q, schema) }
	var now time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT now()").Scan(&now))
	old := partition.DayOf(now) - 3
	require.NoError(t, partition.CreateDay(ctx, pool, schema, partition.Inbox, old, time.Second))
	_, err := pool.Exec(ctx, sql(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, processed_at, bucket)
		SELECT 'payments', `+partition.IDSQL("$1::bigint + g", "g")+`, 'E', 'done', 1, 3, '\x00', '', now(), $2
		FROM generate_series(1, 100000) AS g`), old.Time().UnixMilli(), int32(old))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, sql(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, max_attempts, payload_hash, payload, bucket)
		SELECT 'payments', m.id, 'E', 3, '\x00', '', /* schema */inbox_bucket(m.id)
		FROM unnest($1::text[]) AS m(id)`), []string{partition.IDAt(now).String(), partition.IDAt(now).String(), "order-1"})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, sql("ANALYZE /* schema */inbox"))
	require.NoError(t, err)

	claim := strings.Replace(sql(claimSQL), batchPlaceholder, "200", 1)
	plan := pgtest.GenericPlan(t, pool, claim, `'payments', 1, '{}'::text[], 60000, true, 'lost'`)
	require.NotContains(t, plan, "Hash Join", plan)
	require.Contains(t, plan, "rows=3 loops=1", "the three pending messages are claimed:\n%s", plan)
	pgtest.RequireNotProbed(t, plan, "inbox_d"+old.String())
}
