package dispatcher

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/inbox"
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
	plan := pgtest.GenericPlan(t, pool, claim, `'payments', 1, '{}'::text[], 60000, true, 'lost', NULL::text[], NULL`, claimPlanning)
	require.NotRegexp(t, `(Seq|Bitmap Heap) Scan on inbox_`, plan, "no partition is read whole:\n%s", plan)
	require.Contains(t, plan, "rows=3 loops=1", "the three pending messages are claimed:\n%s", plan)
	pgtest.RequireNotProbed(t, plan, "inbox_d"+old.String())
}

// A plan of the claim made while the inbox was small stays right as it
// grows: PostgreSQL keeps the generic plan of a prepared statement, made
// here while the partition of undated ids held three messages; once it
// holds 20,000 done ones too, the claim still reads only the three (without
// claimPlanning, that plan reads the partition whole). It runs in one
// transaction, its executions rolled back to a savepoint, so that the
// statement and its cached plan stay on one server connection behind a
// transaction pooler too.
func TestAClaimPlanMadeOnASmallInboxStaysRight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	sql := func(q string) string { return ident.Render(q, schema) }
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: beginBatchSQL(time.Minute)})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	store := func(n int, status string) { storeUndated(t, tx, schema, n, status) }
	store(3, "pending")
	name := fmt.Sprintf("claim_%d", rand.Int64())
	claim := strings.Replace(sql(claimSQL), batchPlaceholder, "200", 1)
	_, err = tx.Exec(ctx, "PREPARE "+name+" AS "+claim)
	require.NoError(t, err)
	explain := func() string {
		_, err := tx.Exec(ctx, "SAVEPOINT claim")
		require.NoError(t, err)
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE "+name+"('payments', 1, '{}'::text[], 60000, true, 'lost', NULL::text[], NULL)")
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT claim")
		require.NoError(t, err)
		return strings.Join(lines, "\n")
	}
	// PostgreSQL settles on a generic plan after five custom ones.
	for range 6 {
		require.Contains(t, explain(), "rows=3 loops=1")
	}
	var generic int
	require.NoError(t, tx.QueryRow(ctx, "SELECT generic_plans FROM pg_prepared_statements WHERE name = $1", name).Scan(&generic))
	require.Positive(t, generic, "PostgreSQL made the generic plan")
	store(20_000, "done")
	plan := explain()
	require.Contains(t, plan, "rows=3 loops=1", "the three pending messages are claimed:\n%s", plan)
	require.NotRegexp(t, `rows=\d{4,} |Removed by Filter: \d{4,}`, plan, "the claim read the consumer's done messages:\n%s", plan)
	_, err = tx.Exec(ctx, "DEALLOCATE "+name)
	require.NoError(t, err)
}

// Completions find their messages by key in a plan made for their
// arguments, not in one cached while the inbox was small: with the pool's
// default statement cache, after five completions on a partition of three
// running messages PostgreSQL would settle on a plan that hash-joins the
// outcomes to every message of the consumer in it, and keep it as the
// partition grows (see byKeyMode). Here the partition grows by 20,000 done
// messages, and the completion that follows must read about as many rows
// as it completes. Counted by pg_stat_xact_user_tables, in one
// transaction, so that behind a transaction pooler every completion runs on
// one server connection.
func TestCompletionsReadOnlyTheirMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	in, err := inbox.New(pool, inbox.Config{Consumer: "payments", Schema: schema})
	require.NoError(t, err)
	d, err := New(pool, Config{Inbox: in, Handlers: map[string]Handler{
		"E": InTx(func(context.Context, pgx.Tx, *Message) error { return nil }),
	}})
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	store := func(n int, status string) { storeUndated(t, tx, schema, n, status) }
	rowsRead := func() int64 {
		var n int64
		require.NoError(t, tx.QueryRow(ctx, `
			SELECT coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0)
			FROM pg_stat_xact_user_tables WHERE schemaname = $1`, schema).Scan(&n))
		return n
	}
	store(3, "running")
	outcomes := make([]outcome, 3)
	for i := range outcomes {
		outcomes[i] = outcome{id: fmt.Sprintf("m%d-running", i+1), status: pgbox.InboxDone}
	}
	complete := func() int {
		_, err := tx.Exec(ctx, "SAVEPOINT complete")
		require.NoError(t, err)
		n, err := d.complete(ctx, tx, 7, outcomes)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "ROLLBACK TO SAVEPOINT complete")
		require.NoError(t, err)
		return n
	}
	for range 6 { // PostgreSQL settles on a generic plan after five custom ones
		require.Equal(t, 3, complete())
	}
	store(20_000, "done")
	before := rowsRead()
	require.Equal(t, 3, complete(), "the three running messages are completed")
	require.Less(t, rowsRead()-before, int64(100), "the completion read the consumer's done messages")
}

// A claim reads the pending index from the frontier on (see package
// frontier): the 20,000 messages claimed before it, whose entries stay in
// the index until VACUUM, are stepped over by a claim that reads from the
// start and not read at all by one that starts at the frontier.
func TestAClaimStartsAtTheFrontier(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	sql := func(q string) string { return ident.Render(q, schema) }
	store := func(n int, prefix, age string) {
		_, err := pool.Exec(ctx, sql(`
			INSERT INTO /* schema */inbox (consumer, message_id, event_type, max_attempts, payload_hash, payload, bucket, available_at)
			SELECT 'payments', $2 || g, 'E', 3, '\x00', '', 0, now() - $3::interval
			FROM generate_series(1, $1::int) AS g`), n, prefix, age)
		require.NoError(t, err)
	}
	store(20_000, "claimed-", "1 hour")
	_, err := pool.Exec(ctx, sql(`UPDATE /* schema */inbox SET status = 'done', attempts = 1, processed_at = now()
		WHERE message_id LIKE 'claimed-%'`))
	require.NoError(t, err)
	store(3, "new-", "1 minute")

	claim := strings.Replace(sql(claimSQL), batchPlaceholder, "200", 1)
	pgtest.RequireFrontierSkips(t, pool, claim, `'payments', 1, '{}'::text[], 60000, true, 'lost', NULL::text[]`,
		"Index Scan using inbox_g0_pending_idx", "rows=3 loops=1", 100, claimPlanning)
}

// storeUndated stores n messages of consumer "payments" with status in the
// partition of undated ids (bucket 0), under claim token 7, named
// m<k>-<status>, in tx.
func storeUndated(t *testing.T, tx pgx.Tx, schema string, n int, status string) {
	t.Helper()
	_, err := tx.Exec(context.Background(), ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, max_attempts, payload_hash, payload, bucket, claim_token)
		SELECT 'payments', 'm' || g || '-' || $2, 'E', $2, 3, '\x00', '', 0, 7
		FROM generate_series(1, $1::int) AS g`, schema), n, status)
	require.NoError(t, err)
}
