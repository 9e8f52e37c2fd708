package admin

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// The operator's reads find their rows through the partial indexes, never
// by reading the dedupe memory: on an analyzed inbox of 30,000 done
// messages and a few failing ones, some of them blocked behind a dead
// message of their ordering key, no plan reads the inbox table whole.
// (The bench's operator scenario times them at 50 million.)
func TestOperatorReadsUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	_, err := pool.Exec(ctx, ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload,
		                               processed_at, last_error, ordering_key, bucket)
		SELECT CASE WHEN g % 2 = 0 THEN 'payments' ELSE 'refunds' END, 'm-' || g, 'ChargeCard',
		       CASE WHEN g % 1000 = 0 THEN 'dead' WHEN g % 1000 = 1 THEN 'pending' ELSE 'done' END, 1, 3,
		       '\x00'::bytea, ''::bytea, now() - g * interval '1 second',
		       CASE WHEN g % 1000 IN (0, 1) THEN 'gateway timeout after ' || g || 's' END,
		       CASE WHEN g % 1000 IN (0, 1, 2) THEN 'order-' || g / 1000 END, -- pending m-1001 and done m-1002 behind dead m-1000
		       /* schema */inbox_bucket('m-' || g)
		FROM generate_series(1, 30000) AS g`, schema))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, ident.Render("ANALYZE /* schema */inbox", schema))
	require.NoError(t, err)

	adm, err := New(pool, Config{Schema: schema})
	require.NoError(t, err)
	var fp string
	require.NoError(t, pool.QueryRow(ctx, ident.Render(
		"SELECT "+fingerprintSQL+" FROM /* schema */inbox AS i WHERE i.status = 'dead' LIMIT 1", schema)).Scan(&fp))
	group := Filter{Fingerprint: fp}
	dead := Filter{Statuses: []pgbox.InboxStatus{pgbox.InboxDead}}
	groupDead := Filter{Fingerprint: fp, Statuses: dead.Statuses}

	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"list --group":               {adm.q["list"], append(group.args(), nil, 50)},
		"list --group --status dead": {adm.q["list"], append(groupDead.args(), nil, 50)},
		"list --status dead":         {adm.q["list"], append(dead.args(), nil, 50)},
		"replay --group --dry-run":   {adm.q["count"], (Filter{Fingerprint: fp, ReplayableOnly: true}).args()},
		"replay --group (a batch)":   {adm.q["replay"], append(group.args(), -1, 1000, nil, int64(0))}, // $14 note, $15 audit record
		"known group":                {adm.q["groupKnown"], []any{fp}},
		"failures":                   {adm.q["failures"], []any{nil, 50, int64(3600000), 12, int64(FailuresReadDefault), false}},
		"stats":                      {adm.q["stats"], nil},
		"show without --consumer":    {adm.q["consumersOf"], []any{"m-17"}},
		"show":                       {adm.q["show"], []any{"payments", "m-18"}},
	} {
		requireNoScanOfRows(t, pool, schema, pgtest.Plan(t, pool, q.sql, q.args...), name)
	}
	require.Regexp(t, `(failure_group|failed)_idx on inbox_g0`, pgtest.Plan(t, pool, adm.q["list"], append(group.args(), nil, 50)...),
		"a group is read through the partition's inbox_failure_group_idx or inbox_failed_idx")
}

// The outbox's stats find its unpublished rows through their partial
// indexes, a status at a time: with 30,000 published rows kept, no plan
// reads the outbox whole.
func TestOutboxReadsUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	_, err := pool.Exec(ctx, ident.Render(`
		INSERT INTO /* schema */outbox (id, topic, event_type, payload, status, published_at, ordering_key, bucket)
		SELECT x.id, 't', 'E', '', x.status, CASE WHEN x.status = 'published' THEN now() END,
		       CASE WHEN g <= 4 THEN 'order-1' END, /* schema */outbox_bucket(x.id)
		FROM generate_series(1, 30000) AS g,
		     LATERAL (SELECT gen_random_uuid() AS id,
		                     CASE g WHEN 1 THEN 'dead' WHEN 2 THEN 'running' WHEN 3 THEN 'pending' ELSE 'published' END AS status) AS x`, schema))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, ident.Render("ANALYZE /* schema */outbox", schema))
	require.NoError(t, err)
	adm, err := New(pool, Config{Schema: schema})
	require.NoError(t, err)
	requireNoScanOfRows(t, pool, schema, pgtest.Plan(t, pool, adm.q["outboxStats"]), "outbox stats")
	st, err := adm.OutboxStats(ctx, StatsOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Pending)
	require.EqualValues(t, 1, st.Running)
	require.EqualValues(t, 1, st.Dead)
	require.EqualValues(t, 1, st.Blocked, "the pending row, behind the dead one")
}

// requireNoScanOfRows fails if plan reads a partition of the inbox or the
// outbox that holds rows whole. An empty partition (days to come, the default one) may
// be: a sequential scan of nothing is its cheapest read.
func requireNoScanOfRows(t *testing.T, pool *pgxpool.Pool, schema, plan, name string) {
	t.Helper()
	for _, m := range seqScan.FindAllStringSubmatch(plan, -1) {
		var rows bool
		require.NoError(t, pool.QueryRow(context.Background(),
			"SELECT EXISTS (SELECT 1 FROM "+pgx.Identifier{schema, m[1]}.Sanitize()+")").Scan(&rows))
		require.False(t, rows, "%s reads %s, which holds rows, whole:\n%s", name, m[1], plan)
	}
}

// seqScan finds the inbox and outbox partitions a plan reads whole.
var seqScan = regexp.MustCompile(`Seq Scan on ((?:in|out)box\w*)`)

// failures reads at most FailuresReadDefault failed messages (and one to
// tell whether there are more), however many there are: with three times
// as many dead ones, the scans of the inbox's partitions return no more
// rows than that, and neither the error pattern nor the histories are
// computed for the others. (At a million dead messages, reading them all
// takes seconds; the bench's operator scenario times it.)
func TestFailuresReadsBoundedRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	_, err := pool.Exec(ctx, ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload,
		                               last_error, errors, bucket)
		SELECT 'payments', 'm-' || g, 'ChargeCard', 'dead', 3, 3, '\x00'::bytea, ''::bytea, 'gateway timeout after ' || g || 's',
		       jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(), 'error', 'timeout')), /* schema */inbox_bucket('m-' || g)
		FROM generate_series(1, $1::int * 3) AS g`, schema), FailuresReadDefault)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, ident.Render("ANALYZE /* schema */inbox", schema))
	require.NoError(t, err)
	adm, err := New(pool, Config{Schema: schema})
	require.NoError(t, err)

	plan := pgtest.GenericPlan(t, pool, adm.q["failures"], fmt.Sprintf("NULL, 50, 3600000, 12, %d, false", FailuresReadDefault))
	scans := scanRows.FindAllStringSubmatch(plan, -1)
	require.NotEmpty(t, scans, plan)
	read := 0
	for _, m := range scans {
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		read += n
	}
	require.LessOrEqual(t, read, FailuresReadDefault+1, "failures reads every failed message:\n%s", plan)

	groups, err := adm.Failures(ctx, FailuresOptions{})
	require.NoError(t, err)
	require.Len(t, groups, 1)
	require.True(t, groups[0].Partial)
	require.EqualValues(t, FailuresReadDefault, groups[0].Count)
}

// scanRows finds the rows each scan of an inbox partition returned, in a
// plan with ANALYZE.
var scanRows = regexp.MustCompile(`Scan\b.* on inbox\w* \w+ \(actual rows=(\d+) `)
