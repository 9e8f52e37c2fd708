package relay

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	for _, s := range []string{"SET LOCAL plan_cache_mode = force_generic_plan", "PREPARE generic AS " + sql(claimSQL)} {
		_, err := tx.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE generic(100, 1, 60000, 'lost', 0)")
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.NotContains(t, plan, "Hash Join", plan)
	require.Contains(t, plan, "Update on outbox o (actual rows=2 loops=1)", plan)
	big := "outbox_d" + old.String()
	for _, line := range lines {
		if strings.Contains(line, " on "+big+" ") && !strings.Contains(line, "never executed") {
			require.NotContains(t, line, "Seq Scan", plan)
			require.NotContains(t, line, "_pkey", "the claim probed the old day's key:\n%s", plan)
		}
	}
}
