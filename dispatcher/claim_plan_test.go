package dispatcher

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

	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	defer conn.Close(ctx)
	claim := strings.Replace(sql(claimSQL), batchPlaceholder, "200", 1)
	plan := explainGeneric(t, conn, claim, `'payments', 1, '{}'::text[], 60000, true, 'lost'`)
	require.NotContains(t, plan, "Hash Join", plan)
	require.Contains(t, plan, "rows=3 loops=1", "the three pending messages are claimed:\n%s", plan)
	big := "inbox_d" + old.String()
	for _, line := range strings.Split(plan, "\n") {
		if strings.Contains(line, " on "+big+" ") && !strings.Contains(line, "never executed") {
			require.NotContains(t, line, "Seq Scan", plan)
			require.NotContains(t, line, "_pkey", "the claim probed the old day's key:\n%s", plan)
		}
	}
}

// explainGeneric returns the plan of query's generic plan, run once with
// args (SQL literals) in a transaction rolled back, on conn, which it
// leaves as it found it.
func explainGeneric(t *testing.T, conn *pgx.Conn, query, args string) string {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	for _, s := range []string{"SET LOCAL plan_cache_mode = force_generic_plan", "PREPARE generic AS " + query} {
		_, err := tx.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE generic("+args+")")
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}
