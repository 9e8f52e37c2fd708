package partition_test

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

// Deciding whether an expired partition can go, and moving its unfinished
// rows out, read those rows only, through the partial indexes: never the
// partition whole, which is a day's traffic and is read while the drop
// holds the table exclusively. On analyzed partitions of 30,000 finished
// rows and a few unfinished ones, no plan reads them whole.
func TestDropReadsOnlyUnfinishedRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	var now time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT now()").Scan(&now))
	old := partition.DayOf(now) - 9
	for _, tbl := range []*partition.Table{partition.Inbox, partition.Outbox} {
		require.NoError(t, partition.CreateDay(ctx, pool, schema, tbl, old, time.Second))
	}
	ids := make([]string, 30_000)
	for k := range ids {
		ids[k] = partition.IDAt(old.Time().Add(time.Duration(k) * time.Millisecond)).String()
	}
	for _, q := range []string{`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload,
		                               processed_at, last_error, bucket)
		SELECT 'payments', m, 'E', s.status, 1, 3, '\x00'::bytea, ''::bytea,
		       CASE WHEN s.status = 'done' THEN now() - interval '8 days' END,
		       CASE WHEN s.status IN ('dead', 'discarded') THEN 'boom' END, /* schema */inbox_bucket(m)
		FROM unnest($1::text[]) WITH ORDINALITY AS x(m, g),
		     LATERAL (SELECT (ARRAY['pending', 'running', 'dead', 'discarded'])[g] AS s0) AS y,
		     LATERAL (SELECT coalesce(y.s0, 'done') AS status) AS s`, `
		INSERT INTO /* schema */outbox (id, topic, event_type, payload, status, published_at, bucket)
		SELECT m::uuid, 't', 'E', '', s.status, CASE WHEN s.status = 'published' THEN now() - interval '8 days' END,
		       /* schema */outbox_bucket(m::uuid)
		FROM unnest($1::text[]) WITH ORDINALITY AS x(m, g),
		     LATERAL (SELECT coalesce((ARRAY['pending', 'running', 'dead'])[g], 'published') AS status) AS s`,
		"ANALYZE /* schema */inbox", "ANALYZE /* schema */outbox",
	} {
		var args []any
		if strings.HasPrefix(strings.TrimSpace(q), "INSERT") {
			args = []any{ids}
		}
		_, err := pool.Exec(ctx, ident.Render(q, schema), args...)
		require.NoError(t, err)
	}

	for _, tbl := range []*partition.Table{partition.Inbox, partition.Outbox} {
		part := tbl.DayPartition(old).Name
		name := ident.Quote(schema) + "." + ident.Quote(part)
		for what, q := range map[string]string{
			"whether it can go":       tbl.ContentsSQL(name, 7*24*time.Hour),
			"its unfinished rows out": tbl.SelectUnfinished(name, "bucket"),
		} {
			plan := pgtest.Plan(t, pool, q)
			require.NotContains(t, plan, "Seq Scan on "+part, "%s reads %s whole:\n%s", what, part, plan)
		}
		recent, unfinished, running, err := tbl.Contents(ctx, pool, name, 7*24*time.Hour)
		require.NoError(t, err)
		require.False(t, recent)
		require.EqualValues(t, tbl.UnfinishedStatuses(), unfinished, "one row of each unfinished status")
		require.EqualValues(t, 1, running)
	}
}
