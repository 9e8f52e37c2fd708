package admin

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/ident"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// Overdue says how long each consumer's earliest due pending message, the
// outbox's earliest due row, and the earliest due unfinished scheduled
// replay have waited past their due time, and whether a maintainer leads;
// work not due yet, or not pending (a replay ended), is no backlog. It reads the pending indexes,
// never the done messages.
func TestOverdue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	adm, err := New(pool, Config{Schema: schema})
	require.NoError(t, err)

	empty, err := adm.Overdue(ctx)
	require.NoError(t, err)
	require.Empty(t, empty.Consumers)
	require.Nil(t, empty.Outbox)
	require.Nil(t, empty.Replay)
	require.Zero(t, empty.Replays)
	require.False(t, empty.MaintainerLeads)
	require.WithinDuration(t, time.Now(), empty.At, time.Minute)

	_, err = pool.Exec(ctx, ident.Render(`
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, available_at, processed_at,
		                               payload_hash, payload, bucket)
		SELECT c, c || '-' || n || '-' || g, 'E', s, 0, 3, now() - due, NULL, '\x00'::bytea, ''::bytea,
		       /* schema */inbox_bucket(c || '-' || n || '-' || g)
		FROM (VALUES (1, 'payments', 'pending', interval '10 minutes'), (2, 'payments', 'pending', interval '2 minutes'),
		             (3, 'refunds', 'pending', interval '-1 hour'), (4, 'shipping', 'running', interval '1 hour'),
		             (5, 'billing', 'dead', interval '1 hour')) AS v(n, c, s, due),
		     generate_series(1, 2) AS g;
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, processed_at, payload_hash, payload, bucket)
		SELECT 'payments', 'done-' || g, 'E', 'done', 1, 3, now(), '\x00'::bytea, ''::bytea, /* schema */inbox_bucket('done-' || g)
		FROM generate_series(1, 20000) AS g;
		INSERT INTO /* schema */outbox (id, topic, event_type, payload, status, available_at, bucket)
		SELECT x.id, 't', 'E', '', 'pending', now() - x.due, /* schema */outbox_bucket(x.id)
		FROM (VALUES (gen_random_uuid(), interval '3 minutes'), (gen_random_uuid(), interval '-1 hour')) AS x(id, due);
		INSERT INTO /* schema */scheduled_replays (run_at, filter, state)
		SELECT now() - due, '{}', state
		FROM (VALUES (interval '12 minutes', 'scheduled'), (interval '4 minutes', 'running'), (interval '-1 hour', 'scheduled'),
		             (interval '2 hours', 'done'), (interval '2 hours', 'cancelled'), (interval '2 hours', 'failed')) AS v(due, state);
		ANALYZE /* schema */inbox;`, schema))
	require.NoError(t, err)

	o, err := adm.Overdue(ctx)
	require.NoError(t, err)
	require.Len(t, o.Consumers, 1, "refunds' is not due yet; shipping's is running, billing's dead: %v", o.Consumers)
	require.InDelta(t, (10 * time.Minute).Seconds(), time.Duration(o.Consumers["payments"]).Seconds(), 5)
	require.NotNil(t, o.Outbox)
	require.InDelta(t, (3 * time.Minute).Seconds(), time.Duration(*o.Outbox).Seconds(), 5)
	require.EqualValues(t, 2, o.Replays, "the two due and unfinished; not the one due later, nor those ended")
	require.NotNil(t, o.Replay)
	require.InDelta(t, (12 * time.Minute).Seconds(), time.Duration(*o.Replay).Seconds(), 5)
	require.False(t, o.MaintainerLeads)

	_, err = pool.Exec(ctx, ident.Render(`INSERT INTO /* schema */river_leader (leader_id, elected_at, expires_at)
		VALUES ('river-1', now(), now() + interval '1 minute')`, schema))
	require.NoError(t, err)
	o, err = adm.Overdue(ctx)
	require.NoError(t, err)
	require.True(t, o.MaintainerLeads)
	_, err = pool.Exec(ctx, ident.Render(`UPDATE /* schema */river_leader SET expires_at = now() - interval '1 second'`, schema))
	require.NoError(t, err)
	o, err = adm.Overdue(ctx)
	require.NoError(t, err)
	require.False(t, o.MaintainerLeads, "a leadership expired is none")

	requireNoScanOfRows(t, pool, schema, pgtest.Plan(t, pool, ident.Render(overdueSQL, schema)), "overdue")
}
