package admin

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// The operator's reads find their rows through the partial indexes, never
// by reading the dedupe memory: on an analyzed inbox of 30,000 done
// messages and a few failing ones, no plan reads the inbox table whole.
// (The bench's operator scenario times them at 50 million.)
func TestOperatorReadsUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	_, err := pool.Exec(ctx, ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload,
		                               processed_at, last_error, bucket)
		SELECT CASE WHEN g % 2 = 0 THEN 'payments' ELSE 'refunds' END, 'm-' || g, 'ChargeCard',
		       CASE WHEN g % 1000 = 0 THEN 'dead' WHEN g % 1000 = 1 THEN 'pending' ELSE 'done' END, 1, 3,
		       '\x00'::bytea, ''::bytea, now() - g * interval '1 second',
		       CASE WHEN g % 1000 IN (0, 1) THEN 'gateway timeout after ' || g || 's' END, /* schema */inbox_bucket('m-' || g)
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
		"replay --group (a batch)":   {adm.q["replay"], append(group.args(), -1, 1000, nil, int64(0))}, // $13 note, $14 audit record
		"known group":                {adm.q["groupKnown"], []any{fp}},
		"failures":                   {adm.q["failures"], []any{nil, 50, int64(3600000), 12}},
		"stats":                      {adm.q["stats"], nil},
		"show without --consumer":    {adm.q["consumersOf"], []any{"m-17"}},
		"show":                       {adm.q["show"], []any{"payments", "m-18"}},
	} {
		plan := explain(t, pool, q.sql, q.args...)
		require.NotContains(t, plan, "Seq Scan on inbox", "%s reads the whole inbox:\n%s", name, plan)
	}
	require.Contains(t, explain(t, pool, adm.q["list"], append(group.args(), nil, 50)...), "inbox_failure",
		"a group is read through inbox_failure_group_idx or inbox_failed_idx")
}

// explain returns query's plan with args bound, as the server makes it
// for a first execution.
func explain(t *testing.T, pool interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, query string, args ...any) string {
	t.Helper()
	rows, err := pool.Query(context.Background(), "EXPLAIN "+query, args...)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}
