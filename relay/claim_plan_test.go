package relay

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/partition"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// The claim and the completion, planned once for every execution (the
// generic plan a prepared statement ends up with), read no partition whole
// and the completion finds each claimed row again in its own partition
// only: on an outbox that keeps 100,000 published rows of an old day, the
// old day's primary key is never probed to claim and record the pending
// ones.
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
	ids := []string{partition.IDAt(now).String(), partition.IDAt(now).String()}
	_, err = pool.Exec(ctx, sql(`
		INSERT INTO /* schema */outbox (id, topic, event_type, payload, bucket)
		SELECT m.id, 't', 'E', '', /* schema */outbox_bucket(m.id) FROM unnest($1::uuid[]) AS m(id)`), ids)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, sql(`INSERT INTO /* schema */outbox_claims (xid, ids) VALUES ('1', $1::uuid[])`), ids)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, sql("ANALYZE /* schema */outbox"))
	require.NoError(t, err)

	plan := pgtest.GenericPlan(t, pool, sql(claimSQL), "100, NULL")
	require.Contains(t, plan, "LockRows (actual rows=2 loops=1)", plan)
	pgtest.RequireNotProbed(t, plan, "outbox_d"+old.String())

	day := int32(partition.DayOf(now))
	var (
		ctids []string
		seqs  []int64
	)
	require.NoError(t, pool.QueryRow(ctx, sql(`SELECT array_agg(ctid::text ORDER BY seq), array_agg(seq ORDER BY seq) FROM /* schema */outbox WHERE status = 'pending'`)).Scan(&ctids, &seqs))
	plan = pgtest.GenericPlan(t, pool, sql(completeSQL), fmt.Sprintf(
		"'1', '{%d,%d}', '{\"%s\",\"%s\"}', '{0,0}', %d, %d, 1, 0, NULL, NULL, NULL, NULL, NULL",
		seqs[0], seqs[1], ctids[0], ctids[1], day, day), strings.ReplaceAll(completePlanning, "$1", "'0'"))
	require.Contains(t, plan, "Update on outbox o (actual rows=2 loops=1)", plan)
	require.Contains(t, plan, "Tid Scan on outbox_d"+partition.DayOf(now).String(), plan)
	for _, line := range strings.Split(plan, "\n") {
		if strings.Contains(line, "Scan on outbox_") && !strings.Contains(line, "outbox_claims") && !strings.Contains(line, "never executed") {
			require.Contains(t, line, "Tid Scan", "the completion read a partition otherwise than by its rows' ctids:\n%s", plan)
		}
	}
	pgtest.RequireNotProbed(t, plan, "outbox_d"+old.String())
}

// A claim reads the pending index from the frontier on (see package
// frontier): the 20,000 rows published before it, whose entries stay in
// the index until VACUUM, are stepped over by a claim that reads from the
// start and not read at all by one that starts at the frontier.
func TestAClaimStartsAtTheFrontier(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	sql := func(q string) string { return ident.Render(q, schema) }
	store := func(n int, age string) {
		_, err := pool.Exec(ctx, sql(`
			INSERT INTO /* schema */outbox (id, topic, event_type, payload, bucket, available_at)
			SELECT gen_random_uuid(), 't', 'E', '', 0, now() - $2::interval
			FROM generate_series(1, $1::int) AS g`), n, age)
		require.NoError(t, err)
	}
	store(20_000, "1 hour")
	_, err := pool.Exec(ctx, sql(`UPDATE /* schema */outbox SET status = 'published', published_at = now()`))
	require.NoError(t, err)
	store(3, "1 minute")

	pgtest.RequireFrontierSkips(t, pool, sql(claimSQL), "100",
		"Index Scan using outbox_undated_pending_idx", "LockRows (actual rows=3 loops=1)", 50)
}
