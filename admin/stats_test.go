package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgbox/pgbox"
	"github.com/pgbox/pgbox/admin"
	"github.com/pgbox/pgbox/internal/ident"
)

// Stats splits pending messages into fresh ones, retrying ones (pending
// after a failure, with when the first is due) and scheduled ones (never
// failed, snoozed until later), and keeps pending as their sum.
func TestStatsSplitsPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.mixed(t) // payments: 3 fresh, 4 failing (retrying), 3 running, 25 dead, 5 discarded, 3 done
	b.exec(t, "UPDATE /* schema */inbox SET available_at = now() + interval '2 hours' WHERE message_id LIKE 'failing-%'")
	b.exec(t, "UPDATE /* schema */inbox SET available_at = now() + interval '1 hour' WHERE message_id = 'failing-2'")
	b.add(t, "payments", "snoozed", 2, pgbox.InboxPending, "", 0)
	b.exec(t, "UPDATE /* schema */inbox SET available_at = now() + interval '10 minutes' WHERE message_id LIKE 'snoozed-%'")

	st, err := b.adm.Stats(ctx, admin.StatsOptions{})
	require.NoError(t, err)
	require.Len(t, st.Consumers, 2)
	p := st.Consumers[0]
	require.Equal(t, "payments", p.Consumer)
	require.Equal(t, []int64{3, 4, 2, 9}, []int64{p.PendingFresh, p.Retrying, p.Scheduled, p.Pending}, "fresh, retrying, scheduled, pending")
	require.Equal(t, []int64{3, 25, 5, 3}, []int64{p.Running, p.Dead, p.Discarded, p.Done})
	require.False(t, p.DoneEstimated, "a never-analyzed inbox is counted")
	require.NotNil(t, p.NextRetryAt)
	require.WithinDuration(t, st.At.Add(time.Hour), *p.NextRetryAt, 5*time.Minute, "the first retry is due in an hour")
	s := st.Consumers[1]
	require.Equal(t, "shipping", s.Consumer)
	require.Zero(t, s.Retrying)
	require.Nil(t, s.NextRetryAt)
}

// Done messages are estimated from the planner's statistics once the inbox
// has them, and counted with Exact.
func TestStatsEstimatesDone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	b.add(t, "payments", "done", 1500, pgbox.InboxDone, "", time.Hour)
	b.add(t, "payments", "dead", 10, pgbox.InboxDead, "timeout", 0)
	b.add(t, "refunds", "done", 500, pgbox.InboxDone, "", time.Hour)
	b.add(t, "shipping", "done", 1, pgbox.InboxDone, "", 0)
	b.exec(t, "ANALYZE /* schema */inbox")

	st, err := b.adm.Stats(ctx, admin.StatsOptions{})
	require.NoError(t, err)
	require.Len(t, st.Consumers, 3)
	for _, c := range st.Consumers {
		require.True(t, c.DoneEstimated, c.Consumer)
	}
	// ANALYZE saw every row of so small a table: the estimates are exact.
	require.EqualValues(t, 1500, st.Consumers[0].Done)
	require.EqualValues(t, 500, st.Consumers[1].Done)
	require.EqualValues(t, 10, st.Consumers[0].Dead, "other statuses are always counted")

	b.add(t, "refunds", "more", 100, pgbox.InboxDone, "", 0)
	exact, err := b.adm.Stats(ctx, admin.StatsOptions{Exact: true})
	require.NoError(t, err)
	require.False(t, exact.Consumers[1].DoneEstimated)
	require.EqualValues(t, 600, exact.Consumers[1].Done)
	require.EqualValues(t, 1, exact.Consumers[2].Done)
}

// The done counts of the last minute and hour are exact while the inbox
// completed no more than 20,000 messages in the hour, and beyond that
// estimated, and said to be, from the newest 20,000: the rate over the
// time they cover times the window. Two consumers complete messages evenly
// over the last 50 minutes, none between 50 and 70 seconds ago (so that
// the minute's count holds still while the test runs): 12,000, then
// 30,000, of which the newest 20,000 cover 33 minutes, at 5 a second each:
// 18,000 an hour. Then 21,000 within the last 40 seconds: the minute's
// count too is estimated.
func TestStatsEstimatesABusyHour(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, admin.Config{})
	done := func(n int, over string) {
		b.exec(t, "DELETE FROM /* schema */inbox")
		b.exec(t, `
			INSERT INTO /* schema */inbox (consumer, message_id, event_type, status, attempts, max_attempts, payload_hash, payload,
			                               processed_at, bucket)
			SELECT CASE WHEN g % 2 = 0 THEN 'payments' ELSE 'refunds' END, 'done-' || g, 'E', 'done', 1, 3, '\x00', '', t, 0
			FROM generate_series(1, $1::int) AS g,
			     LATERAL (SELECT now() - g * $2::interval / $1::int AS t) AS w
			WHERE t NOT BETWEEN now() - interval '70 seconds' AND now() - interval '50 seconds'`, n, over)
	}
	lastMinute := func() map[string]int64 {
		rows, err := b.pool.Query(ctx, ident.Render(`SELECT consumer, count(*) FROM /* schema */inbox WHERE processed_at > now() - interval '1 minute' GROUP BY 1`, b.schema))
		require.NoError(t, err)
		n := map[string]int64{}
		for rows.Next() {
			var c string
			var k int64
			require.NoError(t, rows.Scan(&c, &k))
			n[c] = k
		}
		require.NoError(t, rows.Err())
		return n
	}

	done(12_000, "50 minutes")
	st, err := b.adm.Stats(ctx, admin.StatsOptions{})
	require.NoError(t, err)
	require.Len(t, st.Consumers, 2)
	minute := lastMinute()
	for _, c := range st.Consumers {
		require.False(t, c.ProcessedLastHourEstimated || c.ProcessedLastMinuteEstimated, c.Consumer)
		require.InDelta(t, 5_960, c.ProcessedLastHour, 2, "%s: 6,000 but for the 40 of the 20 seconds left out", c.Consumer)
		require.Equal(t, minute[c.Consumer], c.ProcessedLastMinute, c.Consumer)
	}

	done(30_000, "50 minutes")
	st, err = b.adm.Stats(ctx, admin.StatsOptions{})
	require.NoError(t, err)
	minute = lastMinute()
	for _, c := range st.Consumers {
		require.True(t, c.ProcessedLastHourEstimated, c.Consumer)
		require.InDelta(t, 18_000, c.ProcessedLastHour, 360, c.Consumer)
		require.False(t, c.ProcessedLastMinuteEstimated, "%s: the newest 20,000 cover the minute", c.Consumer)
		require.Equal(t, minute[c.Consumer], c.ProcessedLastMinute, c.Consumer)
	}

	done(21_000, "40 seconds")
	st, err = b.adm.Stats(ctx, admin.StatsOptions{})
	require.NoError(t, err)
	for _, c := range st.Consumers {
		require.True(t, c.ProcessedLastHourEstimated && c.ProcessedLastMinuteEstimated, c.Consumer)
		require.Greater(t, c.ProcessedLastMinute, int64(10_000), "%s: more than the 10,000 of the newest 20,000", c.Consumer)
	}
}
