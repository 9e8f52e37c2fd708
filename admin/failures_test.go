package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/pgtest"
)

// Two consumers whose messages fail the same way are two groups, as
// Failures shows them: each fingerprint counts, lists and replays its own
// consumer's messages only.
func TestFailureGroupIsOneConsumersLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.add(t, "payments", "dead", 5, pgbox.InboxDead, "gateway timeout", 0)
	b.add(t, "refunds", "dead", 3, pgbox.InboxDead, "gateway timeout", 0)

	groups, err := b.adm.Failures(ctx, admin.FailuresOptions{})
	require.NoError(t, err)
	require.Len(t, groups, 2)
	require.NotEqual(t, groups[0].Fingerprint, groups[1].Fingerprint)
	for _, g := range groups {
		n, err := b.adm.Count(ctx, admin.Filter{Fingerprint: g.Fingerprint, ReplayableOnly: true})
		require.NoError(t, err)
		require.Equal(t, g.Count, n, "%s's group counts its own line", g.Consumer)
	}

	n, err := b.adm.Replay(ctx, admin.ReplayOptions{Filter: admin.Filter{Fingerprint: groups[1].Fingerprint}})
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	require.Equal(t, 5, b.count(t, b.pool, "consumer = 'payments' AND status = 'dead' AND replays = 0"), "the other consumer's line is left alone")
}

// FIRST and LAST FAILURE are failed attempts from the history, not receive
// times; operators' actions in the history are not failures.
func TestFailuresFirstAndLastFailureComeFromTheHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.exec(t, `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload,
		                               received_at, last_error, errors, bucket)
		VALUES ('payments', 'a', 'ChargeCard', 'dead', 2, 2, '\x00', '', '2026-01-01 09:00:00Z', 'timeout',
		        '[{"attempt":1,"at":"2026-01-01T10:00:00Z","error":"timeout"},
		          {"action":"replayed","at":"2026-01-03T00:00:00Z","replay":1},
		          {"attempt":1,"at":"2026-01-02T10:00:00Z","error":"timeout"}]', /* schema */inbox_bucket('a')),
		       ('payments', 'b', 'ChargeCard', 'dead', 1, 1, '\x00', '', '2026-01-01 09:30:00Z', 'timeout',
		        '[{"attempt":1,"at":"2026-01-01T11:00:00Z","error":"timeout"}]', /* schema */inbox_bucket('b'))`)

	groups, err := b.adm.Failures(ctx, admin.FailuresOptions{})
	require.NoError(t, err)
	require.Len(t, groups, 1)
	g := groups[0]
	require.Equal(t, time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC), *g.FirstFailedAt)
	require.Equal(t, time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC), *g.LastFailedAt, "the replay at 01-03 is no failure")
	require.Equal(t, time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC), g.FirstSeen.UTC(), "first_seen stays the receive time")
}

// Since keeps the groups with a failed attempt in the window and counts
// those attempts; Buckets spreads them over the window, oldest first.
func TestFailuresSinceAndTrend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	// Group "timeout": attempts 45, 25, 5 and 4 minutes ago, and one a
	// day ago. Group "declined": one attempt two hours ago.
	b.exec(t, `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload,
		                               last_error, errors, bucket)
		SELECT 'payments', 'timeout-' || g, 'ChargeCard', 'dead', 3, 3, '\x00'::bytea, ''::bytea, 'timeout',
		       jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now() - make_interval(mins => m), 'error', 'timeout')),
		       /* schema */inbox_bucket('timeout-' || g)
		FROM unnest(ARRAY[45, 25, 5, 4, 1440]) WITH ORDINALITY AS x(m, g)
		UNION ALL
		SELECT 'payments', 'declined-1', 'ChargeCard', 'pending', 1, 3, '\x00'::bytea, ''::bytea, 'declined',
		       jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now() - interval '2 hours', 'error', 'declined')),
		       /* schema */inbox_bucket('declined-1')`)

	all, err := b.adm.Failures(ctx, admin.FailuresOptions{})
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Nil(t, all[0].Trend)
	require.Zero(t, all[0].FailuresInWindow)

	recent, err := b.adm.Failures(ctx, admin.FailuresOptions{Since: time.Hour, Buckets: 6})
	require.NoError(t, err)
	require.Len(t, recent, 1, "declined last failed two hours ago")
	g := recent[0]
	require.Equal(t, "timeout", g.Normalized)
	require.EqualValues(t, 5, g.Count, "the group is still all of its messages")
	require.EqualValues(t, 4, g.FailuresInWindow)
	require.NotNil(t, g.Trend)
	require.Equal(t, []int64{0, 1, 0, 1, 0, 2}, g.Trend.Counts, "10-minute buckets: 45, 25, then 5 and 4 minutes ago")
	require.Equal(t, admin.Duration(10*time.Minute), g.Trend.Bucket)

	_, err = b.adm.Failures(ctx, admin.FailuresOptions{Buckets: 6})
	require.ErrorContains(t, err, "a trend needs a window")
}

// GroupKnown tells a drained group (its messages replayed and done since)
// from a fingerprint that nothing ever had, and refuses a malformed one.
func TestGroupKnown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.add(t, "payments", "dead", 2, pgbox.InboxDead, "gateway timeout", 0)
	groups, err := b.adm.Failures(ctx, admin.FailuresOptions{})
	require.NoError(t, err)
	fp := groups[0].Fingerprint

	b.exec(t, "UPDATE /* schema */inbox SET status = 'done', processed_at = now()") // replayed, then done
	n, err := b.adm.Count(ctx, admin.Filter{Fingerprint: fp})
	require.NoError(t, err)
	require.Zero(t, n, "a group holds no done message")
	known, err := b.adm.GroupKnown(ctx, fp)
	require.NoError(t, err)
	require.True(t, known, "drained, not unknown")

	known, err = b.adm.GroupKnown(ctx, "0123456789ab")
	require.NoError(t, err)
	require.False(t, known)

	_, err = b.adm.GroupKnown(ctx, "F2946CD7C667")
	require.ErrorContains(t, err, "expected 12 lower-case hex digits")
	_, err = b.adm.Count(ctx, admin.Filter{Fingerprint: "f2946cd7"})
	require.ErrorContains(t, err, "expected 12 lower-case hex digits")
}

// Failures, GroupKnown and Stats bind every parameter in the query modes
// that send them as text.
func TestFailureGroupsInUntypedQueryModes(t *testing.T) {
	t.Parallel()
	for _, mode := range pgtest.UntypedModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupOn(t, pgtest.NewPoolMode(t, mode, 2), admin.Config{})
			b.mixed(t)

			groups, err := b.adm.Failures(ctx, admin.FailuresOptions{Consumer: "payments", Since: 24 * time.Hour, Buckets: 4})
			require.NoError(t, err)
			require.Empty(t, groups, "b.mixed records no attempt in the histories")
			groups, err = b.adm.Failures(ctx, admin.FailuresOptions{})
			require.NoError(t, err)
			require.Len(t, groups, 2)
			known, err := b.adm.GroupKnown(ctx, groups[0].Fingerprint)
			require.NoError(t, err)
			require.True(t, known)
			n, err := b.adm.Count(ctx, admin.Filter{Fingerprint: groups[0].Fingerprint})
			require.NoError(t, err)
			require.EqualValues(t, 34, n, "25 dead, 5 discarded, 4 failing")

			st, err := b.adm.Stats(ctx, admin.StatsOptions{})
			require.NoError(t, err)
			require.Len(t, st.Consumers, 2)
			require.EqualValues(t, 4, st.Consumers[0].Retrying)
		})
	}
}

// Failures reads the newest FailuresReadDefault dead and failing messages:
// with more, the groups it returns are counted from those and marked
// Partial, and a group none of them is in is missing; Exact reads them
// all. With exactly FailuresReadDefault, nothing is partial.
func TestFailuresReadsTheNewestAndSaysSo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	n := admin.FailuresReadDefault
	b.add(t, "payments", "old", 1, pgbox.InboxDead, "gateway timeout", time.Hour)
	b.add(t, "payments", "new", n-1, pgbox.InboxDead, "card declined", 0)

	groups, err := b.adm.Failures(ctx, admin.FailuresOptions{})
	require.NoError(t, err)
	require.Len(t, groups, 2)
	for _, g := range groups {
		require.False(t, g.Partial, "every failed message was read")
	}

	b.add(t, "payments", "newer", 1, pgbox.InboxPending, "card declined", 0)
	groups, err = b.adm.Failures(ctx, admin.FailuresOptions{})
	require.NoError(t, err)
	require.Len(t, groups, 1, "the oldest message's group is not among the newest %d", n)
	require.True(t, groups[0].Partial)
	require.EqualValues(t, n, groups[0].Count)
	require.EqualValues(t, n-1, groups[0].Dead)
	require.EqualValues(t, 1, groups[0].Failing)

	groups, err = b.adm.Failures(ctx, admin.FailuresOptions{Exact: true})
	require.NoError(t, err)
	require.Len(t, groups, 2)
	require.EqualValues(t, n, groups[0].Count)
	require.EqualValues(t, 1, groups[1].Count)
	require.Equal(t, "gateway timeout", groups[1].Normalized)
	for _, g := range groups {
		require.False(t, g.Partial)
	}
}

// With KeepQuiet, Since keeps every group: those with no failed attempt in
// the window too, counted 0 there, so one call gives every group and the
// window's counts. Without a window it is refused.
func TestFailuresKeepQuiet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.exec(t, `
		INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload,
		                               last_error, errors, bucket)
		VALUES ('payments', 'old', 'ChargeCard', 'dead', 1, 1, '\x00', '', 'timeout',
		        jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now() - interval '2 days', 'error', 'timeout')), /* schema */inbox_bucket('old')),
		       ('payments', 'new', 'ChargeCard', 'dead', 1, 1, '\x00', '', 'declined',
		        jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now() - interval '1 minute', 'error', 'declined')), /* schema */inbox_bucket('new'))`)

	recent, err := b.adm.Failures(ctx, admin.FailuresOptions{Since: time.Hour, Buckets: 4})
	require.NoError(t, err)
	require.Len(t, recent, 1, "without KeepQuiet, the quiet group is left out")

	all, err := b.adm.Failures(ctx, admin.FailuresOptions{Since: time.Hour, Buckets: 4, KeepQuiet: true})
	require.NoError(t, err)
	require.Len(t, all, 2)
	in := map[string]int64{}
	for _, g := range all {
		in[g.Normalized] = g.FailuresInWindow
	}
	require.Equal(t, map[string]int64{"declined": 1, "timeout": 0}, in)

	_, err = b.adm.Failures(ctx, admin.FailuresOptions{KeepQuiet: true})
	require.ErrorContains(t, err, "KeepQuiet is set but Since is 0")
}
