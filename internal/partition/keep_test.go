package partition_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox/internal/partition"
)

// A retention of -1 keeps for ever: no partition is dropped, however old,
// neither a day's nor a past generation's, and every row stays.
func TestRetentionMinusOneDropsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old := b.today(t) - 30
	for _, tbl := range []*partition.Table{partition.Inbox, partition.Outbox} {
		require.NoError(t, partition.CreateDay(ctx, b.pool, b.schema, tbl, old, time.Second))
	}
	id := partition.IDAt(old.Time().Add(time.Hour)).String()
	b.exec(t, `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, processed_at, bucket)
		SELECT 'payments', m, 'E', 'done', 1, 3, sha256('p'), 'p', now() - interval '30 days', /* schema */inbox_bucket(m)
		FROM unnest(ARRAY[$1, 'undated']) AS m`, id)
	b.exec(t, `
		INSERT INTO /* schema */outbox (id, topic, event_type, payload, status, published_at, bucket)
		VALUES ($1, 't', 'E', '', 'published', now() - interval '30 days', /* schema */outbox_bucket($1))`, id)
	b.exec(t, "UPDATE /* schema */partitioning SET generation_started_at = now() - interval '30 days' WHERE table_name = 'inbox'")

	r := b.maintain(t, partition.Options{InboxRetention: -1, OutboxRetention: -1, GenerationPeriod: 7 * 24 * time.Hour})
	require.Empty(t, r.Dropped)
	require.EqualValues(t, 1, r.Generation, "generations still start: only drops wait on retention")
	require.Equal(t, "inbox_d"+old.String(), b.where(t, id))
	require.Equal(t, "inbox_g0", b.where(t, "undated"))
	var published int
	require.NoError(t, b.pool.QueryRow(ctx, b.sql("SELECT count(*) FROM /* schema */outbox")).Scan(&published))
	require.Equal(t, 1, published)
}

// A past generation is not dropped while a worker holds one of its
// messages under a lease: the move to the current generation would change
// the row's bucket, by which the worker renews its lease and records the
// outcome, so the handler's outcome would be lost and the message run
// again. It goes once the outcome is recorded.
func TestAGenerationWaitsForItsLeasedMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.exec(t, `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload,
		                               processed_at, claim_token, available_at, bucket)
		VALUES ('payments', 'old-done', 'E', 'done', 1, 3, sha256('p'), 'p', now() - interval '8 days', NULL, now(), 0),
		       ('payments', 'leased', 'E', 'running', 1, 3, sha256('p'), 'p', NULL, 42, now() + interval '1 minute', 0)`)
	b.exec(t, "UPDATE /* schema */partitioning SET generation_started_at = now() - interval '8 days' WHERE table_name = 'inbox'")
	opts := partition.Options{InboxRetention: 7 * 24 * time.Hour, OutboxRetention: -1, GenerationPeriod: 7 * 24 * time.Hour}

	r := b.maintain(t, opts)
	require.EqualValues(t, 1, r.Generation)
	require.Empty(t, r.Dropped)
	require.Equal(t, []string{"inbox_g0"}, r.Postponed)
	require.Empty(t, r.Crowded, "a lease ends by itself: nothing to prune row by row")
	var ours int
	require.NoError(t, b.pool.QueryRow(ctx, b.sql(`
		SELECT count(*) FROM /* schema */inbox
		WHERE consumer = 'payments' AND message_id = 'leased' AND bucket = 0 AND claim_token = 42 AND status = 'running'`)).Scan(&ours))
	require.Equal(t, 1, ours, "the worker still finds its message where it claimed it")

	b.exec(t, "UPDATE /* schema */inbox SET status = 'dead', claim_token = NULL WHERE message_id = 'leased'") // its outcome
	r = b.maintain(t, opts)
	require.Equal(t, []string{"inbox_g0"}, r.Dropped)
	require.EqualValues(t, 1, r.Kept)
	require.Equal(t, "inbox_g1", b.where(t, "leased"))
}

// A partition that holds more unfinished rows than a drop may move is
// kept and reported crowded, so that its expired finished rows are pruned
// row by row instead (package maintenance does).
func TestACrowdedPartitionIsReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old := b.today(t) - 9
	require.NoError(t, partition.CreateDay(ctx, b.pool, b.schema, partition.Inbox, old, time.Second))
	var ids []string
	for k := range 10 {
		ids = append(ids, partition.IDAt(old.Time().Add(time.Duration(k)*time.Minute)).String())
	}
	b.exec(t, `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload, processed_at, bucket)
		SELECT 'payments', m, 'E', CASE WHEN g <= 3 THEN 'dead' ELSE 'done' END, 1, 3, sha256('p'), 'p',
		       CASE WHEN g > 3 THEN now() - interval '8 days' END, /* schema */inbox_bucket(m)
		FROM unnest($1::text[]) WITH ORDINALITY AS x(m, g)`, ids)
	opts := partition.Options{InboxRetention: 7 * 24 * time.Hour, OutboxRetention: -1, MaxKept: 2}

	r := b.maintain(t, opts)
	require.Empty(t, r.Dropped)
	require.Equal(t, []string{"inbox_d" + old.String()}, r.Postponed)
	require.Equal(t, []string{"inbox_d" + old.String()}, r.Crowded)

	opts.MaxKept = 3
	r = b.maintain(t, opts)
	require.Equal(t, []string{"inbox_d" + old.String()}, r.Dropped)
	require.Empty(t, r.Crowded)
	require.EqualValues(t, 3, r.Kept)
}
