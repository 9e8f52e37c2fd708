package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/ident"
)

// blockedSQL gives consumer payments three ordering keys. Key A: a dead
// head (a-1) and, behind it, two fresh messages, one retrying (replayed,
// it failed again) and one snoozed: all four blocked. Key B: a head
// backing off after a failure (b-1) and one fresh message behind it,
// which waits for the head, not for an operator: fresh. Key C: a
// discarded head, which holds nothing up, and a fresh message. Refunds
// has a dead message of key A too: another consumer's, which blocks
// nothing of payments. The outbox has a dead row of key A with one
// pending row behind it, and a pending row of key B.
const blockedSQL = `
INSERT INTO /* schema */inbox (consumer, message_id, seq, event_type, status, attempts, max_attempts, ordering_key, last_error,
                               available_at, payload_hash, payload, bucket)
SELECT m.consumer, m.id, m.seq, 'ChargeCard', m.status, m.attempts, 3, m.key, m.err, now() + m.due, '\x00', '', /* schema */inbox_bucket(m.id)
FROM (VALUES
    ('payments', 'a-1', 1, 'dead', 3, 'A', 'gateway timeout', interval '0'),
    ('payments', 'a-2', 2, 'pending', 0, 'A', NULL, interval '0'),
    ('payments', 'a-3', 3, 'pending', 0, 'A', NULL, interval '0'),
    ('payments', 'a-4', 4, 'pending', 1, 'A', 'card declined', interval '1 minute'),
    ('payments', 'a-5', 5, 'pending', 0, 'A', NULL, interval '1 hour'),
    ('payments', 'b-1', 6, 'pending', 1, 'B', 'card declined', interval '1 minute'),
    ('payments', 'b-2', 7, 'pending', 0, 'B', NULL, interval '0'),
    ('payments', 'c-1', 8, 'discarded', 3, 'C', 'bad payload', interval '0'),
    ('payments', 'c-2', 9, 'pending', 0, 'C', NULL, interval '0'),
    ('refunds', 'r-1', 0, 'dead', 3, 'A', 'gateway timeout', interval '0')
) AS m(consumer, id, seq, status, attempts, key, err, due);
INSERT INTO /* schema */outbox (id, seq, topic, event_type, payload, status, ordering_key, bucket)
SELECT x.id, x.seq, 't', 'E', '', x.status, x.key, /* schema */outbox_bucket(x.id)
FROM (VALUES ('019a0000-0000-7000-8000-00000000000a'::uuid, 1, 'dead', 'A'),
             ('019a0000-0000-7000-8000-00000000000b'::uuid, 2, 'pending', 'A'),
             ('019a0000-0000-7000-8000-00000000000c'::uuid, 3, 'pending', 'B')) AS x(id, seq, status, key)`

// Messages held behind a dead head of their key are blocked, a count of
// their own, and no longer fresh, retrying or scheduled; those behind a
// head that is backing off, or a discarded one, are not.
func TestStatsCountsBlocked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	_, err := b.pool.Exec(ctx, ident.Render(blockedSQL, b.schema))
	require.NoError(t, err)

	st, err := b.adm.Stats(ctx, admin.StatsOptions{})
	require.NoError(t, err)
	require.Len(t, st.Consumers, 2)
	p := st.Consumers[0]
	require.Equal(t, "payments", p.Consumer)
	require.Equal(t, []int64{2, 1, 0, 4, 7}, []int64{p.PendingFresh, p.Retrying, p.Scheduled, p.Blocked, p.Pending},
		"fresh (b-2, c-2), retrying (b-1), scheduled, blocked (a-2 to a-5), pending")
	require.Zero(t, st.Consumers[1].Blocked, "refunds")
	require.EqualValues(t, 1, st.Outbox.Blocked)
	require.EqualValues(t, 2, st.Outbox.Pending, "blocked rows are pending too")
}

// Show names the dead message that holds a blocked message's key, and
// only for a blocked message.
func TestShowNamesTheKeyHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	_, err := b.pool.Exec(ctx, ident.Render(blockedSQL, b.schema))
	require.NoError(t, err)
	b.exec(t, `UPDATE /* schema */inbox SET errors = jsonb_build_array(jsonb_build_object('attempt', 3, 'at', '2026-01-02T03:04:05Z', 'error', 'gateway timeout'))
		WHERE message_id = 'a-1'`)

	for _, id := range []string{"a-2", "a-4", "a-5"} {
		d, err := b.adm.Show(ctx, "payments", id)
		require.NoError(t, err)
		require.Equal(t, &admin.KeyHolder{Attempts: 3, DeadSince: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), ID: "a-1"}, d.BlockedBy, id)
	}
	for _, id := range []string{"a-1", "b-2", "c-2"} {
		d, err := b.adm.Show(ctx, "payments", id)
		require.NoError(t, err)
		require.Nil(t, d.BlockedBy, id)
	}
}

// A filter by ordering key keeps that key's messages, in list, count and
// replay alike.
func TestFilterByOrderingKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	_, err := b.pool.Exec(ctx, ident.Render(blockedSQL, b.schema))
	require.NoError(t, err)

	f := admin.Filter{Consumer: "payments", OrderingKey: "A"}
	var ids []string
	require.NoError(t, b.adm.List(ctx, admin.ListOptions{Filter: f}, func(m admin.Message) error {
		ids = append(ids, m.ID)
		return nil
	}))
	require.Equal(t, []string{"a-5", "a-4", "a-3", "a-2", "a-1"}, ids)
	n, err := b.adm.Count(ctx, admin.Filter{OrderingKey: "A"})
	require.NoError(t, err)
	require.EqualValues(t, 6, n, "refunds' r-1 too")
	n, err = b.adm.Replay(ctx, admin.ReplayOptions{Filter: admin.Filter{OrderingKey: "B"}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "b-1, the only replayable message of key B")
}

// The outbox's list filters by ordering key too.
func TestOutboxListByOrderingKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	_, err := b.pool.Exec(ctx, ident.Render(blockedSQL, b.schema))
	require.NoError(t, err)
	var seqs []int64
	require.NoError(t, b.adm.OutboxList(ctx, admin.OutboxListOptions{Filter: admin.OutboxFilter{OrderingKey: "A"}}, func(m admin.OutboxMessage) error {
		seqs = append(seqs, m.Seq)
		return nil
	}))
	require.Equal(t, []int64{2, 1}, seqs)
}

// OutboxShow names the dead row that holds a blocked row's key.
func TestOutboxShowNamesTheKeyHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	_, err := b.pool.Exec(ctx, ident.Render(blockedSQL, b.schema))
	require.NoError(t, err)
	d, err := b.adm.OutboxShow(ctx, uuid.MustParse("019a0000-0000-7000-8000-00000000000b"))
	require.NoError(t, err)
	require.NotNil(t, d.BlockedBy)
	require.Equal(t, "019a0000-0000-7000-8000-00000000000a", d.BlockedBy.ID)
	d, err = b.adm.OutboxShow(ctx, uuid.MustParse("019a0000-0000-7000-8000-00000000000c"))
	require.NoError(t, err)
	require.Nil(t, d.BlockedBy, "key B has no dead row")
}
